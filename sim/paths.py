"""Where the project's committed data lives (the repository root, next to the package)."""

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parent
HARDWARE_DIR = REPO_DIR / "hardware"
MODEL_CATALOG_DIR = PACKAGE_DIR / "catalog" / "models"
SCENARIO_DIR = REPO_DIR / "scenarios"
CALIBRATION_DIR = REPO_DIR / "calibration"
SHARED_DATA_DIR = REPO_DIR.parent / "shared" / "data"
