"""Graph primitives the bound and the tree builders share: exact integer max-flow, automorphisms."""
