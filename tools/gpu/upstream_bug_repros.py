"""The minimal reproductions of the upstream bugs fixed by patches 0004 and 0015.

Run on a GPU with the unpatched and the patched wheel; prints one line per case
(``ok`` or the exception) and exits 0 either way: it reports, it does not test.
The tests of the fixes are in tests/py/dynamo (lowering/, runtime/).
"""

import torch
import torch_tensorrt


class ReturnsNone(torch.nn.Module):  # patch 0004
    def forward(self, x):
        return x * 2, None


class AddInPlaceReturnNothing(torch.nn.Module):  # patch 0004, with the mutation kept
    def forward(self, x, d):
        x.add_(d)


class MutatedBufferWithTorchOp(torch.nn.Module):  # patch 0015
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 16))

    def forward(self, x):
        self.state.add_(x)
        return torch.relu(x + self.state)


def report(name, fn):
    """One line: ``name: <what fn returns>``, or the exception it raised."""
    try:
        print(f"{name}: {fn()}", flush=True)
    except Exception as e:  # noqa: BLE001 -- the report is the point
        print(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:240]}", flush=True)


def main():
    x = torch.randn(4, 16).cuda()

    def returns_none():
        ep = torch.export.export(ReturnsNone().cuda(), (x,))
        trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=[x], min_block_size=1)
        out, none = trt(x)
        return f"ok, outputs equal eager: {torch.equal(out, x * 2) and none is None}"

    def add_in_place():
        d = torch.randn(4, 16).cuda()
        ep = torch.export.export(AddInPlaceReturnNothing().cuda(), (x.clone(), d))
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[x.clone(), d], min_block_size=1
        )
        y = x.clone()
        trt(y, d)
        return f"ok, input updated: {torch.allclose(y, x + d)}"

    def cudagraphs_with_buffer():
        ep = torch.export.export(MutatedBufferWithTorchOp().cuda(), (x,))
        trt = torch_tensorrt.dynamo.compile(
            ep,
            arg_inputs=[x],
            min_block_size=1,
            torch_executed_ops={torch.ops.aten.relu.default},
        )
        eager = MutatedBufferWithTorchOp().cuda()
        with torch_tensorrt.runtime.enable_cudagraphs(trt) as graphed:
            same = [torch.allclose(graphed(x), eager(x)) for _ in range(3)]
        return f"ok, outputs equal eager over 3 calls: {all(same)}; state advanced: {torch.allclose(trt.state, eager.state)}"

    report("return (x * 2, None)", returns_none)
    report("x.add_(d), no return", add_in_place)
    report("whole-graph CUDA graphs, mutated buffer", cudagraphs_with_buffer)


if __name__ == "__main__":
    main()
