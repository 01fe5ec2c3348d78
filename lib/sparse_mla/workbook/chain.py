"""``sparse-mla run``: execute the workbook's notebooks in order, headless, with papermill.

Every ``notebooks/NN_*.ipynb`` (two digits, underscore) runs in name order in a fresh kernel, with the notebook
folder as working directory, and is written executed to ``results/<profile>/NN_*.ipynb`` (one folder per profile, so
a CPU run never replaces the records of a GPU run); after each one, ``summary.{json,md}`` in that folder are
rewritten from the reports of all executed notebooks there, and ``results/summary.{json,md}`` from those of every
profile folder (:mod:`sparse_mla.workbook.summary`). Parameters come from a profile
file ``params/<profile>.yaml`` (``cpu`` for a CPU-only machine, ``gpu`` for a CUDA GPU) whose top-level keys are
notebook stems; papermill injects them after the notebook's ``parameters`` cell. A new notebook joins the chain by
its file name alone.

An executed notebook is written to a temporary file first and moved into place only when it ran to the end,
so a failed run never leaves a half-written record in place of a good one (papermill's own partial output is kept
as ``NN_*.failed.ipynb`` beside it for inspection).
"""
from __future__ import annotations

import keyword
import os
import re
import time
from pathlib import Path

from . import summary
from ..errors import Interrupted, UserInputError, cli_int, expand_path, writable_dir
from ..files import make_dir

NOTEBOOK_RE = summary.NOTEBOOK_RE


class NotebookFailed(RuntimeError):
    """A notebook of the chain raised: the message names the notebook, the cell and the error."""


def project_root() -> Path:
    """The checkout root: the folder holding ``notebooks/`` and ``params/`` above this package
    (``lib/sparse_mla/workbook``). Raises :class:`UserInputError` where the package is installed without them (a
    plain ``pip install .``, into site-packages): the chain runs from a checkout installed editable."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "notebooks").is_dir() or not (root / "params").is_dir():
        raise UserInputError(f"sparse-mla is installed at {Path(__file__).resolve().parents[1]}, outside a checkout "
                             "of the workbook (no notebooks/ and params/ above it); accepted: from the checkout, "
                             "pip install -e '.[workbook,...]' (the README's set-up), then run its sparse-mla")
    return root


def profiles(params_dir: Path | None = None) -> list[str]:
    """Names of the profile files ``params/<profile>.yaml``."""
    params_dir = params_dir or project_root() / "params"
    return sorted(p.stem for p in params_dir.glob("*.yaml") if p.is_file())


def discover(notebooks_dir: Path) -> list[Path]:
    """The chain: ``NN_*.ipynb`` files of ``notebooks_dir`` in name order."""
    return sorted(p for p in notebooks_dir.iterdir() if NOTEBOOK_RE.match(p.name) and p.is_file())


#: Deepest list/mapping nesting of a parameter value: papermill writes values as Python literals, and CPython's
#: parser refuses ~200 nested brackets ("too many nested parentheses").
MAX_DEPTH = 100


def _depth(v, level: int = 0) -> int:
    if level > MAX_DEPTH or not isinstance(v, (list, dict)):
        return level
    items = v.values() if isinstance(v, dict) else v
    return max((_depth(x, level + 1) for x in items), default=level + 1)


def load_profile(profile: str, params_dir: Path | None = None) -> dict[str, dict]:
    import yaml

    params_dir = params_dir or project_root() / "params"
    if not re.fullmatch(r"[A-Za-z0-9_-]+", str(profile)):
        raise UserInputError(f"profile {profile!r} is not a profile name; accepted: "
                             f"{', '.join(profiles(params_dir)) or 'none found'} (files params/<profile>.yaml)")
    path = params_dir / f"{profile}.yaml"
    if not path.is_file():
        raise UserInputError(f"unknown profile {profile!r}; accepted: {', '.join(profiles(params_dir)) or 'none found'}"
                             f" (files params/<profile>.yaml)")
    class NoAliasLoader(yaml.SafeLoader):   # a few bytes of nested aliases can expand to gigabytes
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError(f"YAML aliases (*name) are not accepted {self.peek_event().start_mark}")
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):   # a key twice: YAML keeps the last one, silently
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.YAMLError(f"the key {key!r} appears twice {key_node.start_mark}")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    try:
        data = yaml.load(path.read_text(), Loader=NoAliasLoader) or {}
    except RecursionError:           # nested past the parser's recursion (a few thousand levels)
        raise UserInputError(f"profile file {path.name} is not accepted YAML (nested too deeply for the parser); "
                             f"accepted: a mapping of notebook stems to parameter dicts, without aliases") from None
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as e:   # ValueError: an integer past 4300 digits
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        raise UserInputError(f"profile file {path.name} is not accepted YAML ({first}); accepted: a mapping of "
                             f"notebook stems to parameter dicts, without aliases") from None
    if not isinstance(data, dict):
        raise UserInputError(f"profile file {path.name} must map notebook stems (strings) to parameter dicts")
    bad = [k for k, v in data.items() if not (isinstance(k, str) and isinstance(v, dict))]
    if bad:
        raise UserInputError(f"profile file {path.name}: entries {', '.join(map(repr, bad))} are not accepted; "
                             f"accepted: notebook stems (strings) mapped to parameter dicts")
    import json

    for stem, values in data.items():
        bad = [k for k in values if not (isinstance(k, str) and k.isidentifier() and not keyword.iskeyword(k))]
        if bad:
            raise UserInputError(f"profile file {path.name}: {stem!r} has parameter names {', '.join(map(repr, bad))}; "
                                 f"accepted: Python identifiers that are not keywords (the notebook's parameters "
                                 f"cell variables)")
        deep = [k for k, v in values.items() if _depth(v) > MAX_DEPTH]
        if deep:
            raise UserInputError(f"profile file {path.name}: parameters {', '.join(map(repr, deep))} of {stem!r} nest "
                                 f"deeper than {MAX_DEPTH} levels, past what Python's parser reads back in the "
                                 f"notebook; accepted: values nested at most {MAX_DEPTH} deep")
        try:
            json.dumps(values)
        except (TypeError, ValueError) as e:
            raise UserInputError(f"profile file {path.name}: parameters of {stem!r} are not plain values ({e}); "
                                 f"accepted: strings, numbers, booleans, null, lists and mappings (quote dates)") \
                from None
    return data


def run_chain(profile: str = "cpu", only: list[str] | None = None, out_dir: Path | None = None,
              notebooks_dir: Path | None = None, kernel_name: str | None = None, timeout: int | None = 3600,
              progress: bool = True) -> list[Path]:
    """Execute the chain with papermill; returns the executed notebooks' paths.

    Args:
        profile: name of a ``params/<profile>.yaml`` file.
        only: notebook stems or two-digit prefixes to run (default: all).
        out_dir: where executed notebooks go (default ``results/<profile>/``). Outside ``results/``, a notebook's
            ``out_dir`` parameter (where it writes its own files: matrix CSV/PNG, checkpoint, GPU records) is set to
            it as well, unless the profile sets it; with the default, notebooks write where their defaults say.
        notebooks_dir: the chain's folder (default ``notebooks/``).
        kernel_name: Jupyter kernel (default: the notebook's own, ``python3``).
        timeout: per-cell execution timeout in seconds.

    Raises:
        UserInputError: unknown profile, an ``only`` entry that matches no notebook, a bad timeout, an output folder
            that :func:`_output_dir` refuses -- all before the first notebook runs.
        NotebookFailed: a notebook raised; the message names it, the cell and the error (its partial output is kept
            as ``*.failed.ipynb``; ``sparse-mla run`` prints the message and exits 1).
    """
    import papermill as pm

    root = project_root()
    notebooks_dir = Path(notebooks_dir or root / "notebooks")
    if out_dir is not None and str(out_dir).strip() == "":
        raise UserInputError(f"output directory {str(out_dir)!r} is empty; accepted: a directory path (default "
                             f"results/<profile>/)")
    out_dir = Path(out_dir) if out_dir is not None else root / "results" / str(profile)
    params, chain, names = _select(profile, only, timeout, notebooks_dir, out_dir)
    out_dir, overview = _output_dir(out_dir, profile, chain, notebooks_dir, root)
    stale = [p.name for p in summary.executed_notebooks(out_dir) if p.name not in names] if out_dir.is_dir() else []
    if progress and stale:
        print(f"[sparse-mla run] note: {', '.join(stale)} in {_shown(out_dir, root)} match no notebook of "
              f"{_shown(notebooks_dir, root)} (an earlier chain's names?): left as they are, not in the summary",
              flush=True)
    done = []
    make_dir(out_dir)   # every check passed (errors.writable_dir creates nothing)
    for nb in chain:
        target = out_dir / nb.name
        tmp = out_dir / _running(nb)
        t0 = time.time()
        if progress:
            print(f"[sparse-mla run] {nb.name} (profile {profile}) ...", flush=True)
        parameters = dict(params.get(nb.stem, {}))
        if not overview and "out_dir" not in parameters and "out_dir" in pm.inspect_notebook(str(nb)):
            parameters["out_dir"] = str(out_dir.resolve())   # what the notebook writes goes there too, not results/
        _execute(nb, tmp, target, parameters, notebooks_dir, kernel_name, progress, timeout, root)
        _finalize(tmp, nb, target, root, profile)
        os.replace(tmp, target)
        (out_dir / _failed(nb)).unlink(missing_ok=True)   # an older failure is no longer the news
        done.append(target)
        overview = _write_summaries(out_dir, names, overview, root)   # after every notebook: a failure keeps what ran
        if progress:
            print(f"[sparse-mla run] {nb.name} -> {_shown(target, root)} ({time.time() - t0:.0f} s)", flush=True)
    if progress and done:
        tops = [out_dir / "summary.md"] + ([out_dir.parent / "summary.md"] if overview else [])
        print(f"[sparse-mla run] summary: {' and '.join(_shown(t, root) for t in tops)} (and .json)", flush=True)
    return done


def _select(profile: str, only, timeout, notebooks_dir: Path,
            out_dir: Path | None = None) -> tuple[dict, list[Path], set[str]]:
    """``(parameters, the notebooks to run, the whole chain's names)``, every argument checked (UserInputError);
    ``out_dir``: the run's output folder (default ``results/<profile>/``), which a profile's folders must lie in."""
    params = load_profile(profile)
    if profile == "gpu":
        from ..machine import require_gpu

        require_gpu("profile 'gpu'", "--profile cpu (the default here)")
    chain = discover(notebooks_dir)
    names = {nb.name for nb in chain}   # the whole chain, also under --only
    stray = sorted(set(params) - {nb.stem for nb in chain})
    if stray:
        raise UserInputError(f"profile {profile!r} has parameters for {', '.join(map(repr, stray))}, which is no "
                             f"notebook; accepted: {', '.join(nb.stem for nb in chain)}")
    _check_parameter_names(profile, params, chain, project_root() / "results" / str(profile) if out_dir is None
                           else Path(out_dir))
    if only is not None and (not only or any(not str(o).strip() for o in only)):
        raise UserInputError(f"--only {only!r} names an empty notebook; accepted: stems or prefixes such as 01 02")
    if only:
        picked = [nb for nb in chain if any(nb.stem == o or nb.stem.startswith(o) for o in only)]
        unknown = [o for o in only if not any(nb.stem == o or nb.stem.startswith(o) for nb in chain)]
        if unknown:
            raise UserInputError(f"no notebook matches {', '.join(map(repr, unknown))}; accepted: "
                                 f"{', '.join(nb.stem for nb in chain)}")
        chain = picked
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1):
        raise UserInputError(f"timeout {timeout!r} is not accepted; accepted: seconds per cell, an integer >= 1")
    return params, chain, names


def _check_parameter_names(profile: str, params: dict, chain: list[Path], out_dir: Path | None = None) -> None:
    """Every parameter a profile gives a notebook is a name of that notebook's ``parameters`` cell (papermill's
    ``inspect_notebook``): papermill only warns about another name and runs the notebook with its default (a
    misspelled ``capabilty`` would run the default GPU). Raises :class:`UserInputError` naming the key and the
    accepted names; ``out_dir``: the run's output folder (:func:`~sparse_mla.workbook.parameters.check_values`)."""
    from papermill import inspect_notebook

    from .parameters import check_values

    for nb in chain:
        given = params.get(nb.stem) or {}
        if not given:
            continue
        cell = inspect_notebook(str(nb))
        declared = list(cell)
        unknown = [k for k in given if k not in declared]
        if unknown:
            raise UserInputError(f"profile {profile!r}: {nb.stem} has no parameter {', '.join(map(repr, unknown))}; "
                                 f"accepted: {', '.join(declared)} (its parameters cell)")
        for k, v in given.items():
            _check_parameter_type(profile, nb.stem, k, v, cell[k]["default"])
        check_values(profile, nb.stem, given, _defaults(cell), nb.parent, out_dir, run_files=run_files(chain))


def run_files(chain: list[Path]) -> list[str]:
    """The names a run writes in its output folder: each notebook's executed copy, its copy while it runs and its
    partial output after a failure, and the profile's summary."""
    return [n for nb in chain for n in (nb.name, _running(nb), _failed(nb))] + ["summary.json", "summary.md"]


def _running(nb: Path) -> str:
    return f".{nb.stem}.running.ipynb"


def _failed(nb: Path) -> str:
    return f"{nb.stem}.failed.ipynb"


def _defaults(cell: dict) -> dict:
    """A parameters cell's defaults as values (papermill's ``inspect_notebook``); an expression is left out."""
    import ast

    out = {}
    for k, v in cell.items():
        try:
            out[k] = ast.literal_eval(v["default"])
        except (ValueError, SyntaxError):
            pass
    return out


def _check_parameter_type(profile: str, notebook: str, key: str, value, default_text: str) -> None:
    """A profile's value of the kind of the parameters cell's default (a YAML ``"false"`` for a ``False``, a text for
    a number: the notebook would fail deep inside, e.g. ``KeyError: 'selected'``). A default of ``None`` takes
    anything. Raises :class:`UserInputError` naming the key, the value and the kind accepted."""
    import ast

    try:
        default = ast.literal_eval(default_text)
    except (ValueError, SyntaxError):
        return                                               # an expression: the notebook's to judge
    kinds = [(bool, "true or false (YAML booleans, unquoted)"), (int, "an integer"), (float, "a number"),
             (str, "a text"), (list, "a list")]
    want = next(((t, what) for t, what in kinds if isinstance(default, t)), None)
    if default is None or want is None:
        return
    t, what = want
    ok = isinstance(value, bool) if t is bool else (not isinstance(value, bool) and isinstance(value, t)) or (
        t is float and isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise UserInputError(f"profile {profile!r}: {notebook}'s {key} = {value!r} ({type(value).__name__}); accepted: "
                             f"{what}, as its parameters cell's default {default_text}")


def _execute(nb: Path, tmp: Path, target: Path, parameters: dict, notebooks_dir: Path, kernel_name, progress: bool,
             timeout, root: Path) -> None:
    """papermill on one notebook into ``tmp``; a failure keeps its partial output as ``*.failed.ipynb`` and becomes
    one :class:`NotebookFailed` naming the notebook, the cell and the error; Ctrl-C or SIGTERM becomes
    :class:`~sparse_mla.errors.Interrupted` naming that partial output."""
    import warnings

    import papermill as pm
    from nbformat.validator import MissingIDFieldWarning

    from .quiet_kernel import QuietKernelManager, interruptible

    try:
        with interruptible(), warnings.catch_warnings():
            # papermill writes the notebook as it goes; nbformat warns that cells of the 4.4 format have no id
            warnings.simplefilter("ignore", MissingIDFieldWarning)
            pm.execute_notebook(str(nb), str(tmp), parameters=parameters, cwd=str(notebooks_dir),
                                kernel_name=kernel_name, progress_bar=progress, execution_timeout=timeout,
                                kernel_manager_class=QuietKernelManager)
    except BaseException as e:
        failed = target.parent / _failed(nb)
        if tmp.exists():
            os.replace(tmp, failed)
            if isinstance(e, KeyboardInterrupt):    # Ctrl-C or SIGTERM mid-notebook: say what is kept, not "nothing"
                raise Interrupted([_shown(failed, root)]) from None
        from nbclient.exceptions import CellTimeoutError, DeadKernelError

        if isinstance(e, (CellTimeoutError, DeadKernelError)):
            what = (f"a cell ran longer than the per-cell timeout of {timeout} s (--timeout)"
                    if isinstance(e, CellTimeoutError) else "its kernel died")
            raise NotebookFailed(f"{nb.name} failed: {what}; its partial output is {_shown(failed, root)}; the "
                                 f"notebooks executed before it and any earlier {_shown(target, root)} are "
                                 f"unchanged") from None
        if isinstance(e, pm.PapermillExecutionError):
            first = (e.source or "").strip().splitlines()[:1]
            raise NotebookFailed(
                f"{nb.name} failed in cell {e.cell_index} (In [{e.exec_count}]"
                + (f", starting {first[0][:60]!r}" if first else "") + f"): {e.ename}: {str(e.evalue)[:300]}; "
                f"its partial output is {failed}; the notebooks executed before it and any earlier {target} "
                f"are unchanged") from e
        raise


def _write_summaries(out_dir: Path, names: set[str], overview: bool, root: Path) -> bool:
    """This profile's summary, and ``results/summary.*`` while ``overview``; returns whether the overview is still
    written (a failure to write it is a warning, not a failed chain)."""
    summary.write_summary(out_dir, names)
    if overview:
        try:   # results/summary.*: every profile folder side by side; secondary to this profile's own summary
            summary.write_overview(out_dir.parent, names)
        except OSError as e:
            print(f"[sparse-mla run] warning: results/summary.* not updated ({type(e).__name__}: {e}); "
                  f"this profile's summary is {_shown(out_dir / 'summary.md', root)}", flush=True)
            return False
    return overview


def _output_dir(out_dir: Path, profile: str, chain: list[Path], notebooks_dir: Path, root: Path) -> tuple[Path, bool]:
    """The checked output folder (made if missing) and whether ``results/summary.*`` is written beside it.

    Refused before anything is created: a folder in ``notebooks/`` (records would join the chain), ``results/``
    itself (it holds the overview), another profile's folder, any other folder under ``results/`` (it holds records
    of other kinds, e.g. ``results/h200/``), and a folder where a record would land on a folder.
    """
    where = expand_path(out_dir, "output directory").resolve()   # checked before anything is created
    if where.is_relative_to(notebooks_dir.resolve()):
        raise UserInputError(f"output directory {str(out_dir)!r} is (inside) the notebooks' own folder; accepted: "
                             f"another directory (default results/<profile>/): executed notebooks would overwrite "
                             f"their sources or join the chain")
    # the code, tests, profiles, and every hidden folder of the checkout (.git, .ci, .venv, .dev ...)
    top = sorted({"lib", "tests", ".git", "params"} | {d.name for d in root.iterdir() if d.is_dir()
                                                       and d.name.startswith(".")})
    own = [(root.resolve(), "the repository itself (its top level)")] + [
        ((root / d).resolve(), f"(inside) the repository's {d}/") for d in top] + [
        (Path(__file__).resolve().parents[1], "(inside) the installed sparse_mla package")]
    for folder, what in own:
        if where == folder or (what.startswith("(inside)") and where.is_relative_to(folder)):
            raise UserInputError(f"output directory {str(out_dir)!r} is {what}, which would receive executed notebooks "
                                 f"and summaries; accepted: results/{profile}/ (the default) or a directory outside "
                                 f"the repository's code, tests and git folder")
    results_root = (root / "results").resolve()
    if where == results_root:
        raise UserInputError(f"output directory {str(out_dir)!r} is results/ itself, which holds the overview of all "
                             f"profiles (summary.*); accepted: results/{profile}/ (the default) or another directory")
    other = next((results_root / p for p in profiles() if p != profile
                  and where.is_relative_to(results_root / p)), None)
    if other is not None:
        raise UserInputError(f"output directory {str(out_dir)!r} is (inside) the records of profile {other.name!r}; "
                             f"accepted for profile {profile!r}: results/{profile}/ (the default) or another directory")
    if where.is_relative_to(results_root) and where != results_root / profile:
        # results/ holds records of other kinds (results/h200/: GPU benchmarks, launch records ...); a chain run
        # there would mix executed notebooks into them and appear as a profile of its own in results/summary.*
        held = sorted(p.name for p in where.iterdir())[:4] if where.is_dir() else []
        raise UserInputError(f"output directory {str(out_dir)!r} is inside results/, where a chain run may write only "
                             f"results/{profile}/" + (f" ({str(out_dir)!r} holds other records: {', '.join(held)})"
                                                      if held else "")
                             + f"; accepted: results/{profile}/ (the default) or a directory outside results/")
    out_dir = writable_dir(out_dir)
    overview = out_dir.resolve().parent == results_root
    records = run_files(chain)
    if overview:
        records += ["../summary.json", "../summary.md"]
    blocked = [name for name in records if Path(os.path.normpath(out_dir / name)).is_dir()]   # out_dir may not exist
    if blocked:
        raise UserInputError(f"{', '.join(blocked)} in {str(out_dir)!r} are folders where the chain's records go; "
                             f"accepted: an output directory without folders of those names")
    return out_dir, overview


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root) if path.is_relative_to(root) else path)


#: stderr lines that are tools talking about themselves, not results: tqdm's redrawn progress bars and the Jupyter
#: kernel's warning about its TCP transport.
_NOISE = re.compile(r"(\[IPKernelApp\] WARNING \| Kernel is running over TCP|\d+%\|.*\||\d+(/\d+)? \[[0-9:<?]+.*(it/s|s/it)\])")


def _without_tool_noise(out):
    """A stderr stream output without progress-bar and kernel-transport lines (None when nothing else is left)."""
    if out.get("output_type") != "stream" or out.get("name") != "stderr":
        return out
    kept = [ln for ln in re.split(r"[\r\n]", out.get("text", "")) if ln.strip() and not _NOISE.search(ln)]
    if not kept:
        return None
    out["text"] = "\n".join(kept) + "\n"
    return out


def _finalize(path: Path, source: Path, target: Path, root: Path, profile: str) -> None:
    """papermill records the input and output paths in the notebook's metadata; keep them relative to the checkout
    so that executed records carry no machine-specific absolute paths. Drop tool noise from stderr (tqdm progress
    bars, the kernel's TCP warning). Also record the parameter profile (read back by
    :mod:`sparse_mla.workbook.summary`)."""
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    nb.metadata["sparse_mla"] = {"profile": profile}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in (_without_tool_noise(o) for o in cell.get("outputs", [])) if o is not None]
    meta = nb.metadata.get("papermill", {})
    for key, p in (("input_path", source), ("output_path", target)):
        if key in meta:
            meta[key] = os.path.relpath(p, root) if Path(p).resolve().is_relative_to(root) else Path(p).name
    nbformat.write(nb, str(path))


def add_cli(sub) -> None:
    root = project_root()
    p = sub.add_parser("run", help="execute the notebooks in order with papermill into results/<profile>/",
                       description=f"Execute the workbook's notebooks/NN_*.ipynb in order with papermill, with the "
                                   f"parameters of params/<profile>.yaml. The workbook is the checkout this command "
                                   f"was installed from ({root}), wherever you run it: its notebooks run, its "
                                   f"results/<profile>/ receives them by default (the folder the README, the "
                                   f"notebooks and the summaries read). --out-dir names another folder; a relative "
                                   f"one is read from the current folder, as every path on the command line. Either "
                                   f"way the checkout's own folders are refused as output folders: its top level, "
                                   f"notebooks/, lib/, tests/, params/, its hidden folders (.git/, .ci/, .venv/ ...), "
                                   f"results/ itself, the records of other profiles and every other folder under "
                                   f"results/ (results/h200/).")
    p.add_argument("--profile", default=None,
                   help="parameter profile: cpu or gpu (default: gpu if a CUDA GPU is visible, else cpu)")
    p.add_argument("--only", nargs="+", metavar="NB", help="notebook stems or prefixes (e.g. 01 02)")
    p.add_argument("--out-dir", default=None, help="where executed notebooks go (default: results/<profile>/ of the checkout named above, not of the current folder); outside results/, also where the notebooks write their own files (their out_dir parameter)")
    p.add_argument("--timeout", type=cli_int, default=3600, help="per-cell timeout in seconds (default 3600)")
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    from ..extras import require

    require("sparse-mla run", "papermill", "nbformat", "nbclient")
    profile = args.profile
    if profile is None:
        from ..machine import has_nvidia_gpu

        profile = "gpu" if has_nvidia_gpu() else "cpu"
    try:
        run_chain(profile, only=args.only, out_dir=args.out_dir, timeout=args.timeout)
    except NotebookFailed as e:
        import sys

        print(f"sparse-mla run: failed: {e}", file=sys.stderr)
        return 1
    return 0
