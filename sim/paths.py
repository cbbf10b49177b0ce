"""Where the project's committed data lives (the repository root, next to the package), and the
shared data folder beside the repository that the commands reading real measurements need."""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent
HARDWARE_DIR = REPO_DIR / "hardware"
MODEL_CATALOG_DIR = PACKAGE_DIR / "catalog" / "models"
SCENARIO_DIR = REPO_DIR / "scenarios"
CALIBRATION_DIR = REPO_DIR / "calibration"
# Real measured data (traces, benchmark runs, kernel tables), read in place and never copied:
# a clone without it runs everything but the trace, import, validation and calibration commands.
SHARED_DATA_DIR = REPO_DIR.parent / "shared" / "data"


def shared_data_missing(path: str | Path, how: str = "give the path of your copy") -> str:
    """For an error about a missing `path`: '; ...' saying that the shared data folder it lies
    in is not on this machine, where it is expected and how to point at it (`how`, when the
    command has its own way); '' when `path` is
    not in a shared data folder (SHARED_DATA_DIR, or any .../shared/data) or that folder is
    there."""
    path = Path(path)
    folder = None
    try:
        inside = path.resolve().is_relative_to(SHARED_DATA_DIR.resolve())
    except (OSError, RuntimeError, ValueError):  # a loop of symbolic links (RuntimeError
        inside = False  # before Python 3.13), a name too long, a NUL character
    if inside:
        folder = SHARED_DATA_DIR
    parts = path.parts
    for i in range(len(parts) - 1):
        if folder is None and parts[i : i + 2] == ("shared", "data"):
            folder = Path(*parts[: i + 2])
    if folder is None or folder.is_dir():
        return ""
    return (
        f"; the shared data folder {folder} is not on this machine: commands that read real "
        f"measurements expect it at {SHARED_DATA_DIR} (beside the repository: sim/paths.py "
        f"SHARED_DATA_DIR); put it (or a link to it) there, or {how}"
    )
