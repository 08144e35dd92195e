"""How SGLang's own Python builds its server's parser: what ``python -m sglang.launch_server`` parses its command
line with (``prepare_server_args``: a plain argparse parser given ``ServerArgs.add_cli_args``). Sent with
servers/arguments_probe.py; importing ``server_args`` takes SGLang's imports (seconds), once per installed version.

SGLang lists many of the environment variables it reads (``sglang.srt.environ.Envs``) but reads others directly
(``SGLANG_HOST_IP``): its list is no refusal's ground, so its variables are not checked."""

DISTRIBUTIONS = ("sglang",)
PROBE = '''
def parser():
    import argparse
    from sglang.srt.server_args import ServerArgs
    built = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(built)
    return built, {}
'''
