"""Loading, checking and writing models, with every failure turned into one clear error.

Writes are atomic: the model goes to a temporary file in the destination folder, then is renamed
over the destination, so a crash never leaves half a model behind and the input is never touched.
External data stays on disk: a model is loaded without its weights, every external reference is
checked first (see ``external_data.py``), and weights are streamed into the output's data file.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, EncodeError, Message

from onnxsat import custom_ops, external_data, inline_weights
from onnxsat.errors import InputChangedError, InputNotFoundError, InvalidModelError, NotOnnxError, OutputPathError
from onnxsat.ir_version import lower_ir_version
from onnxsat.node_order import sort_model
from onnxsat.proto_fields import all_graphs

# Protobuf refuses to serialize a message over 2 GiB; bigger models keep weights in external data.
_PROTOBUF_LIMIT = 2**31 - 1


def over_protobuf_limit(model: onnx.ModelProto) -> bool:
    """Whether ``model`` is too large to serialize as one message: its weights must travel apart."""
    try:
        return model.ByteSize() > _PROTOBUF_LIMIT
    except EncodeError:  # protobuf's upb will not even size a message over its limit
        return True


def check_input_path(path: str | os.PathLike[str]) -> Path:
    """The input must be an existing regular file."""
    source = Path(path)
    if not source.exists():
        raise InputNotFoundError(f"input model not found: {source}")
    if not source.is_file():
        raise InputNotFoundError(f"input model is not a file: {source}")
    return source


def load_model(path: str | os.PathLike[str], weights_on_disk: bool = False) -> onnx.ModelProto:
    """Read ``path`` as an ONNX model, or raise a user-facing error.

    External data is not read: its references are checked (inside the model's folder, regular files,
    offsets in range) and left in place; :func:`model_folder` gives the folder they are relative to.
    With ``weights_on_disk``, a large one-file model's large initializers are left in the file too, as
    external references to it (``inline_weights``); :func:`save_model` with ``inline_source`` writes
    them back into one file.
    """
    source = check_input_path(path)
    try:
        lazy = inline_weights.load_structure(source) if weights_on_disk else None
        model = lazy if lazy is not None else onnx.load(str(source), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as error:
        text = " ".join(str(error).split())[:200]
        raise NotOnnxError(f"{source} is not a readable ONNX model (truncated or another format): {text}") from None
    except OSError as error:
        raise InputNotFoundError(f"cannot read {source}: {error.strerror or error}") from None
    if model.ir_version == 0 or not model.HasField("graph"):
        raise NotOnnxError(f"{source} is not an ONNX model (no IR version or graph)")
    bad_text = _first_non_utf8_field(model)
    if bad_text:
        raise NotOnnxError(f"{source} is damaged: its field {bad_text} holds text that is not valid UTF-8")
    external_data.check_references(model, model_folder(source))
    return model


def load_runnable(path: str | os.PathLike[str], weights_on_disk: bool = False) -> tuple[onnx.ModelProto, list[str]]:
    """:func:`load_model`, then what every command needs before reading the graph, and a note per change.

    Converters may append nodes out of order (ONNX Runtime runs them, the checker and every walk that
    reads producers first do not), and ``onnx.helper`` stamps its newest IR version, which ONNX Runtime
    may not read yet: nodes are put in topological order, and the IR version is lowered when the
    model's opsets allow it. A model with onnxruntime-extensions' ops gets that package's library
    registered for the sessions to come.
    """
    model = load_model(path, weights_on_disk=weights_on_disk)
    notes = []
    registered = custom_ops.use_for(model)
    if registered:
        notes.append(registered)
    lowered = lower_ir_version(model)
    if lowered:
        notes.append(lowered)
    reordered = sort_model(model)  # loaded here: nobody else holds it
    if reordered:
        notes.append(f"nodes put in topological order ({reordered} graph(s) had them out of order)")
    return model, notes


def _first_non_utf8_field(message: Message, path: str = "model") -> str | None:
    """The path of the first text field that is not UTF-8, or None.

    ONNX is proto2, whose parser accepts any bytes in a string field; Python then hands such a field
    over as ``bytes`` instead of ``str``, and every later step (the checker, names, locations) would
    trip over it in its own way. One check at the door gives one clear refusal instead.
    """
    stack = [(message, path)]
    while stack:
        current, where = stack.pop()
        for field, value in current.ListFields():
            values = [value] if isinstance(value, (str, bytes, Message)) else value  # else a repeated field
            if field.type == FieldDescriptor.TYPE_STRING:
                if any(isinstance(v, bytes) for v in values):
                    return f"{where}.{field.name}"
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                stack.extend((v, f"{where}.{field.name}") for v in reversed(values))
    return None


def model_folder(path: str | os.PathLike[str]) -> Path:
    """The folder a model file's external-data locations are relative to."""
    return Path(path).resolve().parent


def check_model(model: onnx.ModelProto) -> None:
    """Run ``onnx.checker``; raise InvalidModelError with its first line on failure.

    External tensors are checked by ``external_data`` when the model is loaded; the checker sees
    empty stand-ins for them, since it can only find data files relative to a path on disk.
    """
    try:
        model = external_data.structure_view(model)
        _declare_unknown_ranks(model.graph)
        _runtime_ops_apart(model)
        if over_protobuf_limit(model):
            return  # the checker cannot take it in memory; ONNX Runtime will load-check it instead
        onnx.checker.check_model(model, full_check=False)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError) as error:
        # ValueError: a field the checker's helpers cannot read (a damaged tensor or type in a mutated file)
        text = " ".join(str(error).split()) or type(error).__name__
        raise InvalidModelError(f"model fails the ONNX checker: {text[:400]}") from None


RUNTIME_DOMAIN = "ai.onnxruntime.onnx_domain"
"""Where the checker's copy puts ops ONNX Runtime defines in the ONNX domain and ONNX does not."""


@functools.cache
def runtime_onnx_ops() -> frozenset[str]:
    """Ops ONNX Runtime registers in the ONNX domain that ONNX itself does not define: onnxruntime-genai's
    builder writes every RMS norm of its decoders as ``SimplifiedLayerNormalization`` there."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as runtime

        schemas = runtime.get_all_operator_schema()
    except (ImportError, AttributeError):  # a build without schemas: none is known
        return frozenset()
    return frozenset(s.name for s in schemas if s.domain in ("", "ai.onnx") and not onnx.defs.has(s.name, ""))


def _runtime_ops_apart(model: onnx.ModelProto) -> None:
    """In the checker's copy: move ops ONNX Runtime defines in the ONNX domain (and ONNX does not) to a domain of
    their own, which the checker does not look into, as it does not into ``com.microsoft``. ORT runs them."""
    known, moved = runtime_onnx_ops(), False
    for graph in all_graphs(model.graph):
        for node in graph.node:
            if node.domain in ("", "ai.onnx") and node.op_type in known:
                node.domain, moved = RUNTIME_DOMAIN, True
    if moved:
        model.opset_import.append(onnx.helper.make_opsetid(RUNTIME_DOMAIN, 1))


def _declare_unknown_ranks(graph: onnx.GraphProto) -> None:
    """In the checker's copy: give a graph input or output that declares no shape at all an empty one.

    Leaving the shape out says its rank is unknown, and ONNX Runtime runs such a model; the checker alone
    demands a shape there. It checks nothing else of it, so the stand-in hides no other fault.
    """
    for value in [*graph.input, *graph.output]:
        if value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape"):
            value.type.tensor_type.shape.SetInParent()


TEMPORARY_NAME_EXTRA = len(".") + 8 + len(".tmp")
"""Bytes a temporary output's name adds to the output's (``.NAME.XXXXXXXX.tmp``, see ``_temporary_beside``)."""


def check_output_path(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str]) -> Path:
    """Refuse an output that would overwrite the input, is a folder, a device or a pipe, sits in a missing
    folder, or has a name too long to be written atomically."""
    text = os.fspath(output_path)
    if text == "-":
        raise OutputPathError("'-' is no file: outputs and reports are written to files, not to standard output")
    if text.endswith(("/", os.sep)):
        raise OutputPathError(f"output path {text} names a folder; give a file name")
    source, target = Path(input_path), Path(output_path)
    if target.exists() and target.is_dir():
        raise OutputPathError(f"output path is a directory: {target}")
    if target.exists() and not target.is_file():
        raise OutputPathError(
            f"output path {target} is a device or a pipe, not a file: an output is written beside it and renamed over "
            "it, which would replace it; give a file path"
        )
    if not target.parent.exists():
        raise OutputPathError(f"output folder does not exist: {target.parent}")
    if not target.parent.is_dir():
        raise OutputPathError(f"output folder is not a directory: {target.parent}")
    if not os.access(target.parent, os.W_OK):
        raise OutputPathError(f"output folder is not writable: {target.parent}")
    if target.exists() and source.exists() and os.path.samefile(source, target):
        raise OutputPathError(f"output path is the input model itself: {target}; choose another path")
    if target.resolve() == source.resolve():
        raise OutputPathError(f"output path is the input model itself: {target}; choose another path")
    longest = _longest_name(target.parent)
    if len(os.fsencode(target.name)) + len(".data") + TEMPORARY_NAME_EXTRA > longest:
        raise OutputPathError(
            f"output file name too long: {len(os.fsencode(target.name))} bytes, and its temporary and data files add "
            f"{TEMPORARY_NAME_EXTRA + len('.data')} to the {longest} this folder allows; give a shorter name"
        )
    return target


def _longest_name(folder: Path) -> int:
    """The longest file name ``folder``'s file system allows (255 on Linux file systems)."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # not POSIX, or the file system will not say
        return 255


def check_not_read(output_path: str | os.PathLike[str], read: Iterable[str | os.PathLike[str]], what: str) -> None:
    """Refuse an output (``what``: "output path", "report path") that would replace a file the run reads
    besides the model: its data, held-out data, or given inputs."""
    target = Path(output_path).resolve()
    for path in read:
        if Path(path).resolve() == target or _same_file(path, target):
            raise OutputPathError(f"{what} {output_path} is a file this run reads ({path}); choose another path")


def _same_file(path: str | os.PathLike[str], other: Path) -> bool:
    """Whether two existing paths are one file (hard links to it, too)."""
    try:
        return os.path.samefile(path, other)
    except OSError:  # one of them does not exist (yet)
        return False


FileState = tuple[int, int, int, int]
"""(device, inode, size, modification time in ns): what changes when a file is replaced or rewritten."""


def file_states(paths: Iterable[str | os.PathLike[str]]) -> dict[Path, FileState]:
    """The state of each of ``paths`` now, to tell later whether one changed (:func:`check_unchanged`)."""
    states = {}
    for path in paths:
        found = os.stat(path)
        states[Path(path)] = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)
    return states


def check_unchanged(states: dict[Path, FileState]) -> None:
    """Refuse to go on when a file read at the start changed since: its weights are read from it as the result is
    written, and a model replaced meanwhile (a producer publishing a new version) gave a result that mixed both,
    verified against the new one."""
    for path, state in states.items():
        try:
            now = file_states([path])[path]
        except OSError:
            now = None
        if now != state:
            raise InputChangedError(
                f"{path} changed on disk while ONNXSat ran (replaced, rewritten or removed); nothing was written, "
                "as the result would mix its old and new contents: run again once it stays put"
            )


def weight_files(model_path: str | os.PathLike[str], outputs: Iterable[str | os.PathLike[str] | None]) -> list[Path]:
    """The external data files the model at ``model_path`` reads, when one of ``outputs`` exists as a file (an
    output could then replace one: nothing to find otherwise, and the model is not read)."""
    if not any(path is not None and Path(path).is_file() for path in outputs):
        return []
    try:
        model = onnx.load(os.fspath(model_path), load_external_data=False)
    except Exception:  # an unreadable model is said by the run that loads it
        return []
    return sorted(external_data.external_paths(model, model_folder(model_path)))


def data_file_path(output_path: str | os.PathLike[str]) -> Path:
    """Where a model written with external data keeps its weights: ``<name>.data`` beside it."""
    target = Path(output_path)
    return target.with_name(f"{target.name}.data")


def check_data_path(output_path: str | os.PathLike[str], weights: Collection[Path]) -> None:
    """Refuse an output whose data file would replace a file the input model still reads (``weights``: its
    resolved external data files), beside the file a symbolic link names, as the output is written there."""
    data_path = data_file_path(_followed(Path(output_path)))
    if data_path.is_dir():
        raise OutputPathError(f"the output's data file would replace a directory: {data_path}")
    if data_path.resolve() in weights:
        raise OutputPathError(
            f"the output's data file {data_path} is the input model's own external data; choose another output name"
        )


def save_model(
    model: onnx.ModelProto,
    output_path: str | os.PathLike[str],
    base_dir: Path | None = None,
    inline_source: Path | None = None,
) -> None:
    """Write ``model`` atomically.

    A model with external data (read from ``base_dir``), or one over 2 GiB, is written with its
    weights in ``<name>.data`` beside it, streamed rather than loaded. Weights that
    ``load_model(weights_on_disk=True)`` left in the one-file model ``inline_source`` go back into one
    file, streamed, as long as it stays under protobuf's 2 GiB.
    """
    target = _followed(Path(output_path))
    if inline_source is not None and base_dir is not None and _one_file_fits(model, base_dir, inline_source):
        _write_atomically(
            target, lambda temporary: inline_weights.write_one_file(model, base_dir, inline_source, temporary)
        )
        return
    if external_data.has_external_data(model) or over_protobuf_limit(model):
        data_target = data_file_path(target)
        with _temporary_beside(data_target) as data_temporary, _temporary_beside(target) as model_temporary:
            external_data.write_model_with_data(model, base_dir, model_temporary, data_temporary, data_target.name)
            os.replace(data_temporary, data_target)
            os.replace(model_temporary, target)
        return

    def write(temporary: str) -> None:
        with open(temporary, "wb") as stream:
            stream.write(model.SerializeToString())
            stream.flush()
            os.fsync(stream.fileno())

    _write_atomically(target, write)


def _one_file_fits(model: onnx.ModelProto, base_dir: Path, source: Path) -> bool:
    if not inline_weights.only_refers_to(model, base_dir, source):
        return False
    tensors = external_data.iter_tensors(model)
    payload = sum(external_data.reference(t, base_dir).length for t in tensors if external_data.is_external(t))
    return model.ByteSize() + payload + 2**20 < _PROTOBUF_LIMIT  # 1 MiB for the tensors' own headers


def write_text_atomic(text: str, output_path: str | os.PathLike[str]) -> None:
    """Write a text file (a report) with the same all-or-nothing guarantee as a model."""
    _write_atomically(Path(output_path), lambda temporary: Path(temporary).write_text(text))


def write_bytes_atomic(data: bytes, output_path: str | os.PathLike[str]) -> None:
    """Write a binary file (a plot) with the same all-or-nothing guarantee as a model."""
    _write_atomically(Path(output_path), lambda temporary: Path(temporary).write_bytes(data))


def _write_atomically(target: Path, write: Callable[[str], None]) -> None:
    """Have ``write`` fill a temporary file beside ``target``, then rename it over ``target``."""
    target = _followed(target)
    with _temporary_beside(target) as temporary:
        write(temporary)
        os.replace(temporary, target)


def _followed(target: Path) -> Path:
    """The file a symbolic link ``target`` names (written there, the link stays a link), else ``target``."""
    return Path(os.path.realpath(target)) if target.is_symlink() else target


@contextmanager
def _temporary_beside(target: Path) -> Iterator[str]:
    """A temporary file in ``target``'s folder (so a rename over ``target`` is atomic).

    It is removed if the block fails (a renamed-away file is already gone); an OSError becomes one
    OutputPathError line.
    """
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as error:
        raise OutputPathError(f"cannot write to {target.parent}: {error.strerror}") from None
    os.close(handle)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600; an output is as readable as any other file
    try:
        yield temporary
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise OutputPathError(f"cannot write {target}: {error.strerror or error}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def check_report_path(
    report_path: str | os.PathLike[str], input_path: str | os.PathLike[str], output_path: str | os.PathLike[str]
) -> Path:
    """A report may go anywhere writable except over the input or the output model."""
    target = check_output_path(input_path, report_path)
    if target.resolve() == Path(output_path).resolve():
        raise OutputPathError(f"report path is the output model's path: {target}; choose another path")
    return target


def output_folder(text: str | None, option: str) -> Path | None:
    """The folder an option names (``--keep``, ``--failures-dir``), created if needed; None if not given."""
    if text is None:
        return None
    folder = Path(text)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputPathError(f"cannot create {option} folder {folder}: {error.strerror or error}") from None
    if not folder.is_dir():
        raise OutputPathError(f"{option} is not a folder: {folder}")
    return folder
