# GPU scenarios of the first PR for #4240 (run with bash .gpu/run python3 tools/gpu/first_pr_4240_scenarios.py):
# a -> None op with an ordinary (KV-layer) converter, the model returning nothing or the state;
# compile() and the standalone engine bound as a C++ caller binds it.
import sys, torch, torch_tensorrt

sys.path.insert(0, "tests/py")  # the root of the test packages
from dynamo.lowering import test_mutating_op_converters as t  # the ops, the converter


class ReturnsNothing(torch.nn.Module):
    def forward(self, cache, rows, pos):
        torch.ops.trt_mut.write_rows_(cache, rows, pos)


class ReturnsState(torch.nn.Module):
    def forward(self, cache, rows, pos):
        torch.ops.trt_mut.write_rows_(cache, rows, pos)
        return cache


ok = True
for M in (ReturnsNothing, ReturnsState):
    cache, rows, pos = t._inputs("cuda")
    expected = cache.clone()
    M()(expected, rows, pos)
    ep = torch.export.export(M(), (cache, rows, pos))
    mod = torch_tensorrt.dynamo.compile(
        ep,
        arg_inputs=[cache, rows, pos],
        require_full_compilation=True,
        min_block_size=1,
    )
    ptr = cache.data_ptr()
    out = mod(cache, rows, pos)
    good = torch.equal(cache, expected) and cache.data_ptr() == ptr
    if M is ReturnsState:
        good = good and torch.equal(out, expected)
    engines = [m.aliased_io for n, m in mod.named_children() if "_run_on_acc" in n]
    print(f"compile {M.__name__}: state updated in place {good}; aliased_io {engines}")
    ok &= good
    # standalone engine, bound as a C++ caller binds it
    import tensorrt as trt

    cache2, rows2, pos2 = t._inputs("cuda")
    eng = torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
        ep, arg_inputs=[cache2, rows2, pos2], require_full_compilation=True
    )
    rt = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    e = rt.deserialize_cuda_engine(eng)
    ctx = e.create_execution_context()
    names = [e.get_tensor_name(i) for i in range(e.num_io_tensors)]
    outs = {}
    for n in names:
        if e.get_tensor_mode(n) == trt.TensorIOMode.INPUT:
            x = {"cache": cache2, "rows": rows2, "pos": pos2}[n]
            if e.get_tensor_dtype(n) == trt.int32 and x.dtype == torch.int64:
                x = x.int()
                outs.setdefault("_keep", []).append(x)
            ctx.set_tensor_address(n, x.data_ptr())
    for n in names:
        if e.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT:
            alias = e.get_aliased_input_tensor(n)
            buf = cache2 if alias == "cache" else torch.empty_like(expected)
            outs[n] = (alias, buf)
            ctx.set_tensor_address(n, buf.data_ptr())
    ctx.execute_async_v3(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    good = torch.equal(cache2, expected)
    print(
        f"standalone {M.__name__}: io {names}, aliases {[(n, v[0]) for n, v in outs.items() if n != '_keep']}, state updated {good}"
    )
    ok &= good
print("ALL OK" if ok else "SOME FAILED")
