"""``onnxsat compress``: evaluate many independent candidate models of one network and keep the best."""
