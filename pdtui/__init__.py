"""pdtui: bring up prefill/decode disaggregated SGLang serving and watch it happen."""

import warnings

__version__ = "0.1.0"

# asyncssh still names DSA (and other algorithms cryptography deprecates) when it is imported: ten lines on stderr
# before every command that uses SSH, which the user can do nothing about. Only that library's own deprecation
# notices are silenced, here, before any module of pdtui imports it.
warnings.filterwarnings("ignore", message=r".* is deprecated and support will be removed", module=r"asyncssh(\.|$)")
