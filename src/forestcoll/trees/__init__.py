"""From integer capacities to spanning trees on physical paths.

* :mod:`.capacities`: a phase's k, time scale U and integer arc capacities (switch excess trimmed);
* :mod:`.splitting`: switch removal by edge splitting, keeping a path bundle per new arc;
* :mod:`.packing`: spanning out-tree packing with multiplicities (Edmonds, constructively; plain and symmetric);
* :mod:`.routing`: logical arcs of packed trees mapped back to physical paths.
"""
