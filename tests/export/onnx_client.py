"""Runs exported artifacts in a fresh process that imports no Keras or TensorFlow."""

import json
import subprocess
import sys
import textwrap

import numpy as np

FORBIDDEN = ("keras", "tensorflow", "jax", "torch", "keras_attn")

RUN_ONNX = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import onnxruntime
    session = onnxruntime.InferenceSession(sys.argv[1])
    inputs = np.load(sys.argv[2])
    outputs = session.run(None, {i.name: inputs[i.name] for i in session.get_inputs()})
    np.save(sys.argv[3], outputs[0])
    """
)

RUN_LITERT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=sys.argv[1])
    runner = interpreter.get_signature_runner("serving_default")
    inputs = np.load(sys.argv[2])
    outputs = runner(**{name: inputs[name] for name in inputs.files})
    np.save(sys.argv[3], next(iter(outputs.values())))
    """
)

CHECK_IMPORTS = textwrap.dedent(
    """
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in {forbidden!r})
    assert not loaded, f"the client imported {{loaded}}"
    """
).format(forbidden=FORBIDDEN)


def run_client(script, *args):
    """Runs `script` (with the import check appended) in a fresh Python."""
    result = subprocess.run(
        [sys.executable, "-c", script + CHECK_IMPORTS, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def run_artifact(script, path, named_inputs, tmp_path):
    """The first output of the artifact at `path` for `named_inputs`."""
    inputs_file, output_file = tmp_path / "inputs.npz", tmp_path / "output.npy"
    np.savez(inputs_file, **named_inputs)
    run_client(script, path, inputs_file, output_file)
    return np.load(output_file)


def translate_in_client(directory, sentences):
    """`OnnxTranslator(directory).translate(sentences)` in a fresh process."""
    script = textwrap.dedent(
        """
        import json, sys
        sys.path.insert(0, sys.argv[1])  # the runtime copied beside the model
        from onnx_translator import OnnxTranslator
        translator = OnnxTranslator(sys.argv[1])
        sentences = json.loads(sys.stdin.readline())
        ids, _ = translator.translate_ids(sentences)
        print(json.dumps({"ids": ids, "texts": translator.translate(sentences)}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script + CHECK_IMPORTS, str(directory)],
        input=json.dumps(sentences) + "\n",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])
