"""Which files a GGUF ``--model`` is: one file, a split model's shards, or vllm-gguf-plugin's ``DIR:QUANT``.

GGUFs of a model GLM-5's size ship split (a Q4 GLM-5 is 400 GB or more, the hub's file limit 50 GB), named as
llama.cpp's ``llama_split_path`` and gguf-py's split writer (``GGUFWriter(split_max_tensors=...)``) name them:
``PREFIX-00001-of-00009.gguf`` ... The metadata (the config) is in the first shard only; the others carry
``split.no`` / ``split.count`` and tensors. vllm-gguf-plugin 0.0.5 reads a model the same way, and the diagnosis and
launch read it as the plugin will, using the plugin's own code where it is importable:

* ``DIR:QUANT`` (a folder and a quant type): the plugin's ``weight_utils.resolve_local_gguf`` -- the first of
  ``*-QUANT.gguf``, ``*-QUANT-*.gguf`` in the folder, fewest dashes first, then by name (the first shard of a split
  model);
* the shards of a split file: the plugin's ``GGUFWeightsAdapter._get_all_gguf_files`` -- from any shard's name,
  every ``PREFIX-i-of-N`` that exists. The plugin skips a missing shard silently (the engine would then fail on a
  missing tensor, or worse); here a missing shard is refused by name.

Where vllm-gguf-plugin is not installed (it is the ``gguf`` extra), the same two rules are applied here, and
:func:`model_files` says which code resolved the files (``discovery``). :func:`read_model` reads them with gguf-py,
each once, and checks that they are one model's shards; :func:`is_gguf` is the one answer to whether a ``--model``
names a GGUF at all.
"""
from __future__ import annotations

import fnmatch
import glob
import os
import re
from pathlib import Path

from ..errors import UserInputError, expand_path
from .metadata import metadata_field
from .tensors import check_shards

#: A shard's name: ``PREFIX-%05d-of-%05d.gguf`` (llama.cpp's ``llama_split_path``; gguf-py's ``format_shard_names``).
SPLIT = re.compile(r"-(\d+)-of-(\d+)\.gguf$")
#: The most shards a split model has here (llama.cpp's names hold five digits).
MAX_SHARDS = 99999
#: A quant type as GGUF file names carry it (vllm-gguf-plugin globs for it: no pattern characters).
QUANT = re.compile(r"[A-Za-z0-9_.+-]+")
PLUGIN = "vllm-gguf-plugin"
OURS = "llama.cpp's split naming (vllm-gguf-plugin not installed)"
SINGLE = "one file (not split)"
ACCEPTED = ("a .gguf file (any shard of a split model) or DIR:QUANT (vllm-gguf-plugin's form, e.g. "
            "/models/glm-5:Q8_0), with the model's config.json and tokenizer in its folder")


def is_gguf(model) -> bool:
    """Whether a ``--model`` names a GGUF, the one answer of the diagnosis and launch: vllm-gguf-plugin's ``DIR:QUANT``
    for an existing folder (its form, :func:`dir_quant`), a path named ``*.gguf`` (any shard of a split model; one that does not
    exist is the GGUF reader's to refuse), or an existing file starting with the GGUF magic ``b"GGUF"``."""
    if dir_quant(model) is not None:      # the form alone: the plugin (and vLLM, logging) is the reader's to import
        return True
    if str(model).lower().endswith(".gguf"):
        return True
    try:
        p = expand_path(str(model), "model")
        if not p.is_file():         # before opening: a FIFO or a device would block the read
            return False
        with open(p, "rb") as f:
            return f.read(4) == b"GGUF"
    except (UserInputError, OSError):
        return False


def reference(model) -> tuple[Path, str] | None:
    """``(folder, quant type)`` where ``model`` is vllm-gguf-plugin's ``DIR:QUANT`` for an existing folder (and not
    itself an existing path), else None. Raises :class:`UserInputError` for a QUANT with characters no GGUF file name
    carries (``*``, ``[``: the plugin would glob them, :func:`dir_quant`) and, where the plugin is installed, one its
    ``is_local_gguf_quant`` does not take (``q8_0``, ``UD-Q4_K_XL``: not a GGUF to vLLM). Importing the plugin imports
    vLLM, which logs on stdout: callers that print read it under the diagnosis' ``quiet_logs`` (launch's
    ``check_model``)."""
    ref = dir_quant(model)
    if ref is None:
        return None
    folder_path, quant = ref
    takes = plugin_object("gguf_utils", "is_local_gguf_quant")     # what vLLM's side asks (the plugin, where installed)
    if takes is not None and not takes(f"{folder_path}:{quant}"):
        raise UserInputError(f"model {str(model)!r}: vllm-gguf-plugin does not take {quant!r} for a GGUF quant type "
                             f"(is_local_gguf_quant: a GGUF type spelled as llama.cpp does, Q8_0, Q4_K_M, IQ3_M; "
                             f"vLLM would not read {str(model)!r} as a local GGUF); accepted: such a type after DIR:, "
                             f"or the path of the model's first .gguf file")
    return ref


def dir_quant(model) -> tuple[Path, str] | None:
    """``(folder, quant type)`` where ``model`` has ``DIR:QUANT``'s form for an existing folder (and is not itself an
    existing path), else None -- the form alone, without the plugin's word on the quant (:func:`reference`). Raises
    :class:`UserInputError` for a QUANT with characters no GGUF file name carries (``*``, ``[``)."""
    text = str(model)
    if ":" not in text or os.path.exists(text):
        return None
    folder, quant = text.rsplit(":", 1)
    try:   # a symlink loop, a name too long: DIR:QUANT's folder named, not an unknown model
        folder_path = expand_path(folder, f"model {text!r}: its DIR:QUANT folder")
    except UserInputError:
        if not QUANT.fullmatch(quant):
            return None
        raise
    if not (quant and folder_path.is_dir()):
        return None
    if not QUANT.fullmatch(quant):          # vllm-gguf-plugin globs for it: no pattern characters
        raise UserInputError(f"model {text!r}: {quant!r} is not a GGUF quant type; accepted: a type as GGUF file names "
                             f"carry it (letters, digits, _ . + -: Q8_0, Q4_K_M, UD-Q4_K_XL) after DIR:")
    return folder_path, quant


def plugin_object(module: str, name: str):
    """vllm-gguf-plugin's ``module.name``, or None where the plugin (or what it imports) cannot be imported."""
    import importlib
    import logging

    quiet = logging.getLogger("torch.utils.cpp_extension")     # "No CUDA runtime is found", at its import
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        obj = importlib.import_module(f"vllm_gguf_plugin.{module}")
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj
    except Exception:  # noqa: BLE001 - not installed, or its compiled part does not load: use the same rule here
        return None
    finally:
        quiet.setLevel(level)


def _resolve_local(folder: Path, quant: str) -> tuple[Path, str]:
    """The plugin's ``resolve_local_gguf(folder, quant)``, or the same rule here; ``(file, discovery)``."""
    resolve = plugin_object("weight_utils", "resolve_local_gguf")
    if resolve is not None:
        try:
            return Path(resolve(str(folder), quant)), PLUGIN
        except ValueError:
            found = None
    else:
        matches = [m for pat in (f"*-{quant}.gguf", f"*-{quant}-*.gguf")
                   for m in glob.glob(os.path.join(glob.escape(str(folder)), pat))]
        found = sorted(matches, key=lambda x: (x.count("-"), x))[0] if matches else None
        if found is not None:
            return Path(found), OURS
    there = sorted(p.name for p in folder.glob("*.gguf"))[:6]
    if resolve is not None and glob.escape(str(folder)) != str(folder) and any(
            fnmatch.fnmatch(n, pat) for n in there for pat in (f"*-{quant}.gguf", f"*-{quant}-*.gguf")):
        raise UserInputError(f"model {f'{folder}:{quant}'!r}: vllm-gguf-plugin's resolve_local_gguf finds no file "
                             f"in {str(folder)!r} although {there[0]!r} is of type {quant!r}: it reads the folder's "
                             f"name as a glob pattern ('[', ']', '*', '?'); accepted: the folder renamed without "
                             f"them, or the first shard's path as --model")
    raise UserInputError(f"model {f'{folder}:{quant}'!r}: no GGUF file of type {quant!r} in {str(folder)!r} (names "
                         f"*-{quant}.gguf or *-{quant}-NNNNN-of-NNNNN.gguf; there: {', '.join(there) or 'no .gguf'}); "
                         f"accepted: {ACCEPTED}")


def shards(path: Path) -> tuple[list[Path], str]:
    """``(every shard of the model, discovery)`` for a GGUF file: ``[path]`` for an unsplit file; for a shard, all
    ``PREFIX-i-of-N`` in order (from any shard). Raises :class:`UserInputError` naming the missing shards and the
    folder."""
    m = SPLIT.search(path.name)
    if not m:
        return [path], SINGLE          # nothing to discover: no import of the plugin (it imports vLLM) for a label
    total, digits, number = int(m.group(2)), len(m.group(1)), int(m.group(1))
    if len(m.group(2)) != digits or not 1 <= number <= total <= MAX_SHARDS:
        raise UserInputError(f"GGUF model {str(path)!r}: {m.group(0)[1:]!r} is not a shard's number; accepted: "
                             f"PREFIX-i-of-N.gguf with 1 <= i <= N <= {MAX_SHARDS}, i and N of the same width "
                             f"(llama.cpp's PREFIX-00001-of-00004.gguf)")
    prefix, suffix = path.name[:m.start(1)], path.name[m.end(2):]
    expected = [path.parent / f"{prefix}{i:0{digits}d}-of-{total:0{digits}d}{suffix}" for i in range(1, total + 1)]
    discover = plugin_object("weights_adapter.default", "GGUFWeightsAdapter._get_all_gguf_files")
    if discover is not None:
        found, how = [Path(f) for f in discover(str(path))], PLUGIN
    else:
        found, how = [f for f in expected if f.is_file()], OURS
    absent = [f for f in expected if f not in found]
    if absent:
        raise UserInputError(f"GGUF model {str(path)!r} is split into {total} shards; {_absent(absent)}; accepted: "
                             f"every shard of the model in one folder, each a file")
    stray = sorted(f.name for f in path.parent.glob(f"{glob.escape(prefix)}*{glob.escape(suffix)}")
                   if f not in expected and getattr(SPLIT.search(f.name), "start", lambda _: -1)(1) == len(prefix))
    if stray:
        raise UserInputError(f"GGUF model {str(path)!r} is split into {total} shards; beside them in "
                             f"{str(path.parent)!r}: {', '.join(stray[:4])}{' ...' if len(stray) > 4 else ''}, "
                             f"named like a shard of it but none of its {total} (a shard number beyond its count, or "
                             f"another count: a stray or another split's shard); accepted: the shards "
                             f"{expected[0].name} ... {expected[-1].name} alone under their name")
    return expected, how


def _absent(shards: list[Path]) -> str:
    """The shards discovery did not find (of one folder), told apart: ``"missing in 'DIR': A, B"`` for names nothing
    has, ``"not a file in 'DIR': C (a folder)"`` for a folder, a link to nothing, a link loop or another non-file under
    a shard's name."""
    def what(f: Path) -> str:
        if f.is_symlink():
            return "a link to no file"
        return "a folder" if f.is_dir() else "a device, pipe or socket"

    def show(fs, label):
        return f"{', '.join(label(f) for f in fs[:4])}{f' ... ({len(fs)} in all)' if len(fs) > 4 else ''}"

    other = [f for f in shards if os.path.lexists(f) and not f.is_file()]
    missing = [f for f in shards if f not in other]
    folder = str(shards[0].parent)
    return "; ".join(([f"missing in {folder!r}: {show(missing, lambda f: f.name)}"] if missing else [])
                     + ([f"not a file in {folder!r}: {show(other, lambda f: f'{f.name} ({what(f)})')}"] if other
                        else []))


def loader_file(model) -> Path:
    """The file vllm-gguf-plugin's loader hands its weights adapter for a ``--model`` that names a GGUF
    (``GGUFModelLoader._prepare_weights``): the file given (any shard of a split model), or for ``DIR:QUANT`` the one
    ``resolve_local_gguf`` picks. Raises :class:`UserInputError` for a path that is not a file or a ``DIR:QUANT``
    with no matching file."""
    ref = reference(model)
    if ref is not None:
        return _resolve_local(*ref)[0]
    path = expand_path(str(model), "model")
    if not path.is_file():
        raise UserInputError(f"GGUF model {str(model)!r} is not a file; accepted: {ACCEPTED}")
    return path


def model_files(model) -> tuple[list[Path], str]:
    """``(the model's GGUF files, the first holding the metadata; discovery)`` for a ``--model`` that names a GGUF:
    a file (any shard of a split model) or ``DIR:QUANT`` (:func:`loader_file`). Raises :class:`UserInputError` for a
    path that is not a file, a ``DIR:QUANT`` with no matching file, or a missing shard."""
    return shards(loader_file(model))


def _reader(path: Path, model):
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # noqa: BLE001 - gguf-py raises ValueError, struct errors, ...
        raise UserInputError(f"model {str(model)!r}: {path.name} is not a GGUF file gguf-py can read "
                             f"({type(e).__name__}: {str(e)[:120]}); accepted: a GGUF file, a preset, a config.json "
                             f"or a checkpoint directory") from None


def check_split(readers: list, files: list[Path]) -> None:
    """Each shard's ``split.no`` / ``split.count`` (gguf-py's split writer writes them into every shard) agree with
    its name: a shard of another split is refused by name."""
    for i, (r, f) in enumerate(zip(readers, files)):
        no, count = metadata_field(r, "split.no", None), metadata_field(r, "split.count", None)
        if len(files) == 1 and (no, count) in ((None, None), (0, 1)):
            continue                                   # an unsplit file (gguf-py writes no split keys then)
        if (no, count) != (i, len(files)):
            said = (f"shard {no + 1} of {count} (split.no {no}, counted from 0)" if isinstance(no, int)
                    else f"split.no {no!r} of split.count {count!r}")
            raise UserInputError(f"GGUF shard {str(f)!r} says it is {said}; its name says shard {i + 1} of "
                                 f"{len(files)}: a shard of another split; accepted: the shards of one model, as "
                                 f"llama.cpp's gguf-split or gguf-py's split writer wrote them")


def read_model(model) -> tuple[list[Path], str, list]:
    """``(files, discovery, readers)``: a GGUF ``--model``'s files (:func:`model_files`) read by gguf-py, each once
    (``readers``: one ``gguf.GGUFReader`` per file, the first holding the metadata), after checking that they are one
    model's shards (:func:`check_split`, :func:`~sparse_mla.gguf.tensors.check_shards`: a tensor twice, shards of two
    splits mixed, refused before anything asks what lacks). Raises :class:`UserInputError` for what
    :func:`model_files` refuses, a file gguf-py cannot read, and a shard of another split."""
    files, discovery = model_files(model)
    readers = [_reader(f, model) for f in files]
    check_split(readers, files)
    check_shards(readers, files, str(model))
    return files, discovery, readers


def gguf_tensor_types(path: str | os.PathLike) -> dict[str, str]:
    """``{GGUF tensor name: GGML type name}`` as stored in the model's files (every shard of a split model)."""
    import gguf

    return {t.name: t.tensor_type.name for f in model_files(path)[0] for t in gguf.GGUFReader(str(f)).tensors}
