"""Runs exported artifacts in a fresh process that imports no Keras or TensorFlow."""

import json
import subprocess
import sys
import textwrap

import numpy as np

FORBIDDEN = ("keras", "tensorflow", "jax", "torch", "keras_attn")

# Both scripts take the artifact, then pairs of an inputs file (`.npz`) and
# the output file (`.npy`) to write: one session serves every pair.
RUN_ONNX = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import onnxruntime
    session = onnxruntime.InferenceSession(sys.argv[1])
    for inputs_file, output_file in zip(sys.argv[2::2], sys.argv[3::2]):
        inputs = np.load(inputs_file)
        feed = {i.name: inputs[i.name] for i in session.get_inputs()}
        np.save(output_file, session.run(None, feed)[0])
    """
)

RUN_LITERT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=sys.argv[1])
    runner = interpreter.get_signature_runner("serving_default")
    for inputs_file, output_file in zip(sys.argv[2::2], sys.argv[3::2]):
        inputs = np.load(inputs_file)
        outputs = runner(**{name: inputs[name] for name in inputs.files})
        np.save(output_file, next(iter(outputs.values())))
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
    return run_artifact_on_each(script, path, [named_inputs], tmp_path)[0]


def run_artifact_on_each(script, path, named_inputs_list, tmp_path):
    """The first output of the artifact at `path` for each of `named_inputs_list`,
    all from one client process (one session, as a server keeps it)."""
    files = []
    for index, named_inputs in enumerate(named_inputs_list):
        inputs_file = tmp_path / f"inputs_{index}.npz"
        np.savez(inputs_file, **named_inputs)
        files += [inputs_file, tmp_path / f"output_{index}.npy"]
    run_client(script, path, *files)
    return [np.load(output_file) for output_file in files[1::2]]


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
