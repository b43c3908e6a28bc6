#!/usr/bin/env python3
"""`python -m moe_model record ...` that also writes each prompt's generated tokens (the recorder keeps them in its
Recording but not in the trace) as JSON to $GEN_OUT, so that they can be set against the server's."""

import json
import os
import sys
from pathlib import Path

import moe_model.cli.record as cli_record
from moe_model.cli.main import main

_write = cli_record._write


def _write_and_tokens(args, model, recording, runtime_version):
    Path(os.environ["GEN_OUT"]).write_text(json.dumps([list(g) for g in recording.generated]))
    return _write(args, model, recording, runtime_version)


cli_record._write = _write_and_tokens
sys.argv[0] = "moe_model"
sys.exit(main())
