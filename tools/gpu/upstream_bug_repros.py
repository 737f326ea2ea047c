"""The minimal reproductions of the upstream bugs fixed by patches 0004, 0015,
0030, 0031 and 0036.

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


class ReadsWrittenCache(torch.nn.Module):  # patch 0030
    def forward(self, cache, u):
        new = torch.ops.aten.slice_scatter.default(cache, u, 2, 3, 4)
        return new.sum(dim=2)


class StridedWrite(torch.nn.Module):  # patch 0031
    def forward(self, cache, u):
        cache[:, :, 0:8:2, :] = u
        return u * 2


class ClonedWrite(torch.nn.Module):  # patch 0036
    def forward(self, cache, u):
        out = cache.clone()
        out[:, :, 3:4, :] = u
        return out * 1.5


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

    def named_outputs_with_an_appended_alias():
        args = (torch.zeros(2, 4, 16, 8).cuda(), torch.randn(2, 4, 1, 8).cuda())
        ep = torch.export.export(ReadsWrittenCache().cuda(), args)
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=list(args),
                min_block_size=1,
                output_binding_names="total",
            )
        )
        return f"ok, engine built ({len(engine)} bytes)"

    def strided_write():
        cache = torch.zeros(2, 4, 16, 8).cuda()
        u = torch.randn(2, 4, 4, 8).cuda()
        ep = torch.export.export(StridedWrite().cuda(), (cache.clone(), u))
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[cache.clone(), u], min_block_size=1
        )
        compiled, eager = cache.clone(), cache.clone()
        trt(compiled, u)
        StridedWrite()(eager, u)
        return f"ok, state equals eager: {torch.equal(compiled, eager)}"

    def cloned_write():
        cache = torch.zeros(2, 4, 16, 8).cuda()
        u = torch.randn(2, 4, 1, 8).cuda()
        ep = torch.export.export(ClonedWrite().cuda(), (cache.clone(), u))
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[cache.clone(), u], min_block_size=1
        )
        mine = cache.clone()
        out = trt(mine, u)
        return (
            f"ok, output equals eager: {torch.equal(out, ClonedWrite()(cache, u))}; "
            f"the caller's cache unchanged (as in eager): {torch.equal(mine, cache)}"
        )

    report("return (x * 2, None)", returns_none)
    report("x.add_(d), no return", add_in_place)
    report("whole-graph CUDA graphs, mutated buffer", cudagraphs_with_buffer)
    report(
        "serialized engine, output_binding_names, KV write read not returned",
        named_outputs_with_an_appended_alias,
    )
    report("cache[:, :, 0:8:2, :] = u", strided_write)
    report("out = cache.clone(); out[:, :, 3:4, :] = u", cloned_write)


if __name__ == "__main__":
    main()
