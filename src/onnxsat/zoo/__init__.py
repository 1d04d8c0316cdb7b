"""Models ONNXSat builds itself: the demo CNN and synthetic graphs for the scale benchmark."""
