"""pdtui: bring up prefill/decode disaggregated SGLang serving and watch it happen."""

__version__ = "0.1.0"
