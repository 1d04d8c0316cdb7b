"""Pictures of graphs: a model's graph (``onnxsat show``, alone or beside its optimized version) and the
e-graph of a small model after saturation (``onnxsat show-egraph``), drawn by Graphviz."""
