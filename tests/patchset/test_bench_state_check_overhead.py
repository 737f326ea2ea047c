"""tools/bench/state_check_overhead.py: the check's part runs on the CPU; the
module's part is skipped in one sentence without a CUDA device."""

import json

import pytest
import torch


@pytest.fixture(scope="module")
def bench(bench_script):
    return bench_script("state_check_overhead")


def test_the_check_part_times_every_size(bench):
    result = bench.check_part([0, 2, 8], calls=3)
    assert set(result["pre_hook_us"]) == {"0", "2", "8"}
    assert set(result["engine_check_us"]) == {"0", "2", "8"}
    assert all(us > 0 for us in result["pre_hook_us"].values())


def test_the_states_written_are_the_model_s(bench):
    pos, u, *states = bench._arguments(2, "cpu")
    bench.WritesStates()(pos, u, *states)
    for state in states:
        assert torch.equal(state[:, :, 3:4], u)
        assert state.nbytes == 1 << 20


def test_one_command_writes_json(bench, tmp_path, capsys):
    out = tmp_path / "result.json"
    bench.main(["--out", str(out), "--states", "0", "1", "--calls", "3"])
    result = json.loads(out.read_text())
    assert set(result["check"]["pre_hook_us"]) == {"0", "1"}
    if not torch.cuda.is_available():
        assert result["module"] == {
            "skipped": "no CUDA device: compile()'s module was not timed"
        }
        assert "no CUDA device" in capsys.readouterr().out


def test_added_cost_over_the_unpatched_module_and_without_the_check(bench):
    module = {"module_us": {"64": 150.0}, "module_check_off_us": {"64": 148.0}}
    unpatched = {"module_us": {"64": 146.5}}
    assert bench.added_us(module, unpatched) == {
        "64": {"over_unpatched": 3.5, "over_check_off": 2.0}
    }
    assert bench.added_us(module, None) == {"64": {"over_check_off": 2.0}}


class _Context:
    """Stands in for an execution context: records what the bench binds and runs."""

    def __init__(self):
        self.bound, self.runs = [], 0

    def get_tensor_shape(self, name):
        return (2, 3)

    def set_tensor_address(self, name, address):
        self.bound.append((name, address))

    def execute_async_v3(self, stream):
        self.runs += 1


def test_the_engine_driven_by_hand_binds_every_tensor_and_aliases_in_place(bench):
    from types import SimpleNamespace

    context = _Context()
    engine = SimpleNamespace(
        context=context,
        in_binding_names=["pos", "u", "s0"],
        out_binding_names=["output0", "s0_new"],
        output_dtypes=[torch.float32, torch.float32],
        aliased_io={"s0_new": ("s0", "kv_cache_update")},
    )
    module = torch.nn.Module()
    module.trt = torch.nn.Module()
    module.trt.engine = engine
    args = [torch.zeros(1), torch.zeros(2), torch.zeros(4)]
    stream = SimpleNamespace(cuda_stream=0, synchronize=lambda: None)
    calls = bench.engine_by_hand(module, args, device="cpu", stream=stream)
    calls["bound"]()
    bound = dict(context.bound)
    assert list(bound) == ["pos", "u", "s0", "output0", "s0_new"]
    assert bound["s0_new"] == bound["s0"] == args[2].data_ptr()
    assert bound["output0"] not in {a.data_ptr() for a in args}
    calls["execute"]()
    assert context.runs == 2 and len(context.bound) == 5
