"""Models whose layers sit inside If, Loop and Scan bodies, timed under ORT alone, after onnxslim and after ONNXSat."""
