"""tests/cold_page.py: the README's first-run block follows tests/cold/*.json and the pins."""

import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cold_page  # noqa: E402

RECORD = {
    "command": "tests/run.sh",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "started": 1796000000,
    "seconds": 2700,
    "disk_bytes": {"target": 30e9, "cargo_home": 1e9, "go_caches": 9e9},
    "cores": 2,
    "memory_bytes": 24 * 2**30,
    "rustc": "1.95.0",
    "go": "go1.26.8",
}


class ColdPage(unittest.TestCase):
    def repo(self):
        """A repository with the pins, a README with an empty block, no record."""
        root = pathlib.Path(tempfile.mkdtemp())
        (root / "tests/peers").mkdir(parents=True)
        (root / "Cargo.toml").write_text('[workspace.package]\nrust-version = "1.95"\n')
        (root / "tests/peers/go.mod").write_text("module x\n\ngo 1.26.0\n")
        (root / "README.md").write_text(f"# x\n\n{cold_page.BEGIN}\nold\n{cold_page.END}\n\ntail\n")
        return root

    def run_page(self, root, *args):
        return subprocess.run(
            [sys.executable, str(HERE / "cold_page.py"), *args, str(root)],
            capture_output=True,
            text=True,
        )

    def test_the_block_says_the_records_figures(self):
        root = self.repo()
        (root / "tests/cold").mkdir()
        (root / "tests/cold/run.json").write_text(json.dumps(RECORD))
        self.assertEqual(self.run_page(root).returncode, 0)
        text = (root / "README.md").read_text()
        self.assertIn("Rust 1.95 or newer", text)
        self.assertIn("Go 1.26.0 or newer", text)
        self.assertIn("The tests took 45 min and 40 GB of disk", text)
        self.assertIn("commit 0123456", text)
        self.assertIn("The demo: not measured yet", text)
        self.assertTrue(text.endswith("\n\ntail\n"))
        self.assertEqual(self.run_page(root, "--check").returncode, 0)

    def test_a_stale_figure_fails_the_check(self):
        root = self.repo()
        (root / "tests/cold").mkdir()
        (root / "tests/cold/run.json").write_text(json.dumps(RECORD))
        self.run_page(root)
        # A newer record, the page left as it was.
        (root / "tests/cold/run.json").write_text(json.dumps(dict(RECORD, seconds=3600)))
        checked = self.run_page(root, "--check")
        self.assertEqual(checked.returncode, 1)
        self.assertIn("not what tests/cold/*.json", checked.stderr)

    def test_a_hand_edit_inside_the_block_fails_the_check(self):
        root = self.repo()
        self.run_page(root)
        readme = root / "README.md"
        readme.write_text(readme.read_text().replace("Rust 1.95", "Rust 1.90"))
        self.assertEqual(self.run_page(root, "--check").returncode, 1)

    def test_a_readme_without_markers_fails(self):
        root = self.repo()
        (root / "README.md").write_text("# x\n")
        self.assertEqual(self.run_page(root, "--check").returncode, 1)


if __name__ == "__main__":
    unittest.main()
