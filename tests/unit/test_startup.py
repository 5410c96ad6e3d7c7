"""The sweep's own process never loads a model: it should not pay for importing torch and
transformers (about 3 s of a 12 s command on 2 cores) only to ask whether there is a GPU or to quiet
a library, and a variant's process not for scipy.stats to score its items. Each check runs in a fresh
interpreter, where nothing is imported yet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import pytest

from selector.variant.availability import gpu_device_files


def fresh_python(code: str) -> dict:  # type: ignore[type-arg]
    # Without a verbosity this test process may have set already (the child would inherit it).
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True,
                         env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_logging_quiets_transformers_without_importing_it() -> None:
    seen = fresh_python(
        "import json, logging, os, sys\n"
        "from selector.logs import setup_logging\n"
        "setup_logging()\n"
        "imported = 'transformers' in sys.modules\n"
        "from transformers.utils import logging as hf\n"
        "print(json.dumps({'imported': imported, 'quiet': hf.get_verbosity() == logging.ERROR}))\n")
    assert seen == {"imported": False, "quiet": True}


def test_logging_quiets_transformers_imported_before_it() -> None:
    seen = fresh_python(
        "import json, logging\n"
        "from transformers.utils import logging as hf\n"
        "hf.set_verbosity_info()\n"
        "from selector.logs import setup_logging\n"
        "setup_logging()\n"
        "print(json.dumps({'quiet': hf.get_verbosity() == logging.ERROR}))\n")
    assert seen == {"quiet": True}


@pytest.mark.skipif(gpu_device_files(), reason="a GPU driver is here: torch is asked, as it should be")
def test_no_gpu_device_files_means_no_cuda_without_importing_torch() -> None:
    seen = fresh_python(
        "import json, sys\n"
        "from selector.variant.availability import cuda_available\n"
        "print(json.dumps({'cuda': cuda_available(), 'torch': 'torch' in sys.modules}))\n")
    assert seen == {"cuda": False, "torch": False}
    import torch

    assert torch.cuda.is_available() is False  # what torch itself says here


def test_scoring_items_needs_no_scipy_stats() -> None:
    # A variant's process scores its items with Clopper-Pearson intervals (the beta quantile, from
    # scipy.special); scipy.stats (about a second to import) comes in only with what needs it: the
    # exact tests and the bootstrap of the selection.
    seen = fresh_python(
        "import json, sys\n"
        "from selector.stats import mean_interval\n"
        "exact = mean_interval([1] * 7 + [0] * 3, binary=True)\n"
        "wilson = mean_interval([1] * 7 + [0] * 3, binary=True, ci_method='wilson')\n"
        "before = 'scipy.stats' in sys.modules\n"
        "from selector.stats import mcnemar_exact\n"
        "p = mcnemar_exact(1, 6)\n"
        "print(json.dumps({'exact': [round(x, 4) for x in exact[:2]], 'wilson': [round(x, 4) for x in wilson[:2]],\n"
        "                  'stats_before': before, 'p': round(p, 4), 'stats_after': 'scipy.stats' in sys.modules}))\n")
    # 7 of 10: Clopper-Pearson's 95% interval [0.3475, 0.9333], Wilson's [0.3968, 0.8922]; McNemar's
    # exact p for 1 against 6 discordant pairs is 2 * (1 + 7) / 128
    assert seen == {"exact": [0.3475, 0.9333], "wilson": [0.3968, 0.8922], "stats_before": False, "p": 0.125,
                    "stats_after": True}


def test_a_process_that_skips_the_exit_collection_still_flushes_logs_streams_and_atexit(tmp_path) -> None:
    # skip_exit_collection spares the interpreter's last garbage collections; everything a process
    # says on its way out must still arrive.
    log_file, atexit_file = tmp_path / "run.log", tmp_path / "atexit.txt"
    code = (
        "import atexit, gc, logging, sys\n"
        "from selector.processes import skip_exit_collection\n"
        f"logging.basicConfig(filename={str(log_file)!r}, level=logging.INFO)\n"
        f"atexit.register(lambda: open({str(atexit_file)!r}, 'w').write('ran'))\n"
        "logging.getLogger('x').info('last words')\n"
        "sys.stdout.write('buffered')\n"
        "skip_exit_collection()\n"
        "print(gc.get_freeze_count() > 0, end='')\n"
        "sys.exit(3)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (out.returncode, out.stdout) == (3, "bufferedTrue")
    assert "last words" in log_file.read_text()
    assert atexit_file.read_text() == "ran"


def test_the_sweeps_own_process_plans_int8_without_importing_bitsandbytes(tmp_path) -> None:
    # The preflight asks whether bitsandbytes is installed (it imports torch with it: seconds, in a
    # process that loads no model); the variant's process imports it, and a broken one is its reason.
    broken = tmp_path / "site" / "bitsandbytes"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise OSError('libbitsandbytes_cpu.so: cannot open shared object file')\n")
    code = (
        "import json, sys\n"
        "from selector.compose import precision_from_dict\n"
        "from selector.precisions import get_backend\n"
        "bnb = get_backend('bnb')\n"
        "int8 = precision_from_dict({'name': 'int8', 'backend': 'bnb', 'method': 'int8'})\n"
        "planned = bnb.availability(int8, 'cpu', load_library=False)\n"
        "imported = 'bitsandbytes' in sys.modules or 'torch' in sys.modules\n"
        "print(json.dumps({'planned': planned, 'imported': imported, 'worker': bnb.availability(int8, 'cpu')}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"planned": [True, ""], "imported": False,
                    "worker": [False, "bitsandbytes does not import: libbitsandbytes_cpu.so: cannot open shared "
                                      "object file"]}
