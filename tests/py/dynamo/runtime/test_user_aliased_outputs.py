"""Outputs aliased by in-place plugins (kind ``user``) are never hidden or miscounted.

Pure Python: runs without a GPU. ``kv_cache_update`` aliases appended after
the graph's own outputs are engine side effects; one the graph returns is not.
"""

from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import (
    graph_output_count,
    user_output_count,
)


class TestUserOutputCount(TestCase):
    def test_trailing_kv_side_effects_are_hidden(self):
        names = ["output0", "output1", "output2"]
        aliased = {"output2": ("cache", "kv_cache_update")}
        self.assertEqual(user_output_count(names, aliased), 2)

    def test_trailing_user_alias_stays_visible(self):
        names = ["output0", "x_state"]
        self.assertEqual(user_output_count(names, {"x_state": ("x", "user")}), 2)
        # a KV side effect after it is still hidden
        aliased = {"x_state": ("x", "user"), "output2": ("cache", "kv_cache_update")}
        self.assertEqual(user_output_count(names + ["output2"], aliased), 2)

    def test_no_aliases(self):
        self.assertEqual(user_output_count(["a", "b"], {}), 2)

    def test_the_graph_output_count_is_the_boundary(self):
        # a KV-written state returned last by the graph is a user output
        names = ["output0", "output1"]
        aliased = {"output1": ("cache", "kv_cache_update")}
        self.assertEqual(user_output_count(names, aliased), 1)  # no count known
        self.assertEqual(user_output_count(names, aliased, 2), 2)
        # an appended side effect after it is still hidden
        aliased["output2"] = ("other", "kv_cache_update")
        self.assertEqual(user_output_count(names + ["output2"], aliased, 2), 2)
        # a count that cannot be right is ignored: the trailing rule applies
        self.assertEqual(user_output_count(names, aliased, 5), 1)

    def test_graph_output_count_reads_the_shape_expressions(self):
        exprs = {"inputs": [{}], "outputs": [{"shape_exprs": [2]}] * 3}
        self.assertEqual(graph_output_count(exprs), 3)
        self.assertIsNone(graph_output_count(None))
        self.assertIsNone(graph_output_count({"inputs": []}))


class TestUserAliasesTravel(TestCase):
    """The ``user`` kind survives the engine info wire format and the engine cache."""

    ALIASED = {"x_new": ("x", "user"), "output1": ("cache", "kv_cache_update")}

    def test_engine_info_round_trip(self):
        from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import (
            deserialize_aliased_io,
            serialize_aliased_io,
        )

        self.assertEqual(
            deserialize_aliased_io(serialize_aliased_io(self.ALIASED)), self.ALIASED
        )

    def test_engine_cache_round_trip(self):
        import torch
        import torch_tensorrt
        from torch_tensorrt.dynamo._engine_cache import BaseEngineCache
        from torch_tensorrt.dynamo._settings import CompilationSettings

        blob = BaseEngineCache.pack(
            b"engine",
            ["x"],
            ["output0", "x_new"],
            [torch_tensorrt.Input.from_tensor(torch.zeros(2))],
            CompilationSettings(),
            False,
            False,
            self.ALIASED,
        )
        self.assertEqual(BaseEngineCache.unpack(blob)[-1], self.ALIASED)


if __name__ == "__main__":
    run_tests()
