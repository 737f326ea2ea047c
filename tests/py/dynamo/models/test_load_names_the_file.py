"""``torch_tensorrt.load`` names the file it cannot load, in one sentence.

A path that is not a file, a file that is not the archive ``torch_tensorrt.save``
writes (a serialized TensorRT engine, text), and an archive neither loader takes
are each refused by one sentence naming the file, without a chained traceback; an
ExportedProgram and a TorchScript module load as before, the TorchScript one
without a traceback printed for torch.export.load's attempt. Runs on the CPU.
"""

import contextlib
import io
import os
import tempfile
import zipfile

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


class TestLoadNamesTheFile(TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name, data=None):
        path = os.path.join(self.dir.name, name)
        if data is not None:
            with open(path, "wb") as f:
                f.write(data)
        return path

    def refused(self, path, error, *words):
        with self.assertRaises(error) as caught:
            torch_tensorrt.load(path)
        message = str(caught.exception)
        self.assertIn(f"'{path}'", message.splitlines()[0])
        for word in words:
            self.assertIn(word, message)
        self.assertIsNone(caught.exception.__cause__)
        self.assertTrue(
            caught.exception.__suppress_context__ or not caught.exception.__context__
        )

    def test_not_a_file(self):
        self.refused(self.path("missing.ep"), FileNotFoundError, "does not exist")
        self.refused(self.dir.name, FileNotFoundError, "is a directory")

    def test_not_an_archive(self):
        engine = self.path("model.engine", bytes(range(256)) * 16)
        self.refused(engine, ValueError, "serialized TensorRT engine")
        self.refused(self.path("notes.txt", b"not a model\n"), ValueError, "archive")

    def test_an_archive_neither_loader_takes(self):
        path = self.path("other.zip")
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("readme.txt", "no model here")
        self.refused(path, ValueError, "torch.export.load", "torch.jit.load")

    def test_what_save_writes_loads(self):
        x = torch.randn(2, 3)
        exported = self.path("double.ep")
        torch.export.save(torch.export.export(Double(), (x,)), exported)
        self.assertEqual(torch_tensorrt.load(exported).module()(x), x * 2)

        scripted = self.path("double.ts")
        torch.jit.save(torch.jit.script(Double()), scripted)
        printed = io.StringIO()
        with contextlib.redirect_stderr(printed):
            module = torch_tensorrt.load(scripted)
        self.assertEqual(module(x), x * 2)
        self.assertNotIn("Traceback", printed.getvalue())


if __name__ == "__main__":
    run_tests()
