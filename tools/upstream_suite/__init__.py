"""Upstream's own test suite run against the installed patched wheel.

``run`` runs pytest on a pytorch/TensorRT checkout's tests with the installed
wheel (never the checkout's sources) and writes a report; the pytest plugin
``gpu_skip_plugin`` counts a test that fails only for lack of a CUDA device as
"needs GPU" instead of failed. Command line: ``tools/upstream-tests --help``.
"""
