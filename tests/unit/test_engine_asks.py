"""No kind check in disguise: each site asks the engine (selector/engines/spec.py) what it is: how it
holds the weights (tests/unit/test_plan_engines.py), whether it is the deploy engine, which in-process
engine its answers are compared with, its load-test advice and its report labels."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from selector.config import PolicyConfig
from selector.engines import check_deploy_engine, engine_for
from selector.engines.inprocess.engine import HfEngineConfig, InProcessEngine
from selector.engines.scripted import ScriptedEngineConfig
from selector.engines.served.attached import AttachedEngineConfig
from selector.engines.served.command import CommandEngineConfig
from selector.engines.vllm.engine import VllmEngineConfig
from selector.errors import ConfigError
from selector.origin import Origin

pytestmark = pytest.mark.fast

HF = engine_for(HfEngineConfig())
VLLM = engine_for(VllmEngineConfig())
TRANSFORMERS_SERVE = engine_for(CommandEngineConfig(server_command="transformers serve {model_path} --port {port}"))
ATTACHED = engine_for(AttachedEngineConfig())


def test_each_engine_says_whether_it_is_the_deploy_engine() -> None:
    assert HF.is_deploy_engine("hf") is True and HF.is_deploy_engine("vllm") is False
    assert VLLM.is_deploy_engine("vllm") is True and VLLM.is_deploy_engine("hf") is False
    # `transformers serve` is a server: deploy_engine=transformers names it, not the in-process engine
    assert TRANSFORMERS_SERVE.is_deploy_engine("transformers") is True and HF.is_deploy_engine("transformers") is False
    assert ATTACHED.is_deploy_engine("vllm") is None  # what serves at a URL is not known here
    assert HF.is_deploy_engine(None) is None and HF.is_deploy_engine("") is None


def test_deploy_engine_takes_one_spelling_per_engine() -> None:
    for ok in (None, "", "hf", "vllm", "tgi", "sglang", "llama.cpp"):
        assert check_deploy_engine(ok, [HF]) is None, ok
    problem = check_deploy_engine("transformers", [HF])
    assert problem is not None and "Did you mean 'hf'?" in problem and "this sweep's engine: hf" in problem
    # ... unless the sweep runs `transformers serve`, whose deploy name it is
    assert check_deploy_engine("transformers", [TRANSFORMERS_SERVE]) is None
    assert "Did you mean 'hf'?" in str(check_deploy_engine("HF", [VLLM]))
    assert "Did you mean 'vllm'?" in str(check_deploy_engine("vLLM", [HF]))
    assert "Did you mean 'vllm'?" in str(check_deploy_engine("vlm", [HF]))  # a typo is not a server of its own
    assert "is an engine kind, not the engine you deploy on" in str(check_deploy_engine("command", [HF]))
    assert "one lowercase word" in str(check_deploy_engine("Text Generation Inference", [HF]))


def test_a_deploy_engine_spelled_otherwise_stops_the_sweep_naming_the_file_and_line() -> None:
    from selector.config import SelectorConfig
    from selector.sweep.preflight import check_deploy

    def planned(deploy: str, engine: object) -> list[SimpleNamespace]:
        return [SimpleNamespace(cfg=SelectorConfig(engine=engine, policy=PolicyConfig(deploy_engine=deploy)))]

    with pytest.raises(ConfigError) as err:
        check_deploy(planned("transformers", HfEngineConfig()), Origin(choices={"policy": "default"}))
    assert err.value.field == "policy.deploy_engine" and "Did you mean 'hf'?" in err.value.problem
    assert "policy/default.yaml:" in str(err.value)
    with pytest.raises(ConfigError) as err:
        check_deploy(planned("transformers", HfEngineConfig()),
                     Origin(choices={"policy": "default"}, given=frozenset({"policy.deploy_engine"})))
    assert "command line" in str(err.value)
    check_deploy(planned("hf", HfEngineConfig()), Origin())
    check_deploy(planned("transformers", CommandEngineConfig(server_command="transformers serve {model_path} --port {port}")),
                 Origin())


def test_the_in_process_comparison_comes_from_the_engine() -> None:
    assert HF.in_process_comparison() is None and ATTACHED.in_process_comparison() is None
    assert engine_for(ScriptedEngineConfig()).in_process_comparison() is None
    assert VLLM.in_process_comparison() is None  # compare_in_process is off by default
    for config in (VllmEngineConfig(compare_in_process=True),
                   CommandEngineConfig(server_command="x --port {port}", compare_in_process=True)):
        local = engine_for(config).in_process_comparison()
        assert isinstance(local, InProcessEngine) and local.config == HfEngineConfig()


def test_selecting_again_checks_deploy_engine_against_the_records_engines() -> None:
    """`selector select` with policy.deploy_engine=...: the same check, against what the records ran on."""
    from selector.config import SelectorConfig
    from selector.sweep.stored import _check_deploy
    from tests.factories import run_record

    records = [run_record("m", "bf16")]  # measured in-process (engine=hf)
    with pytest.raises(ConfigError) as err:
        _check_deploy(SelectorConfig(policy=PolicyConfig(deploy_engine="transformers")), records,
                      {"policy.deploy_engine"})
    assert str(err.value).startswith("command line") and "Did you mean 'hf'?" in err.value.problem
    _check_deploy(SelectorConfig(policy=PolicyConfig(deploy_engine="hf")), records, set())
    _check_deploy(SelectorConfig(policy=PolicyConfig(deploy_engine="tgi")), records, set())
