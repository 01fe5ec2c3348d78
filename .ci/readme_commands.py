"""The README's set-up and test commands, one per line, as .ci/run runs them (the README is their one home).

Every line of the ```bash blocks under "## Set up" and "## Test", without its trailing comment; comment lines and
blank lines are skipped. Prints nothing and exits 1 if a section or its commands are missing."""
import re
import sys
from pathlib import Path

SECTIONS = ("## Set up", "## Test")


def commands(readme: str) -> list[str]:
    out = []
    for section in SECTIONS:
        if f"\n{section}\n" not in readme:
            raise SystemExit(f"README.md has no section {section!r}")
        body = readme.split(f"\n{section}\n", 1)[1].split("\n## ", 1)[0]
        blocks = re.findall(r"```bash\n(.*?)```", body, re.S)
        lines = [re.sub(r"\s+#\s.*$", "", ln).strip() for b in blocks for ln in b.splitlines()]
        found = [ln for ln in lines if ln and not ln.startswith("#")]
        if not found:
            raise SystemExit(f"README.md's section {section!r} has no command")
        out += found
    return out


if __name__ == "__main__":
    print("\n".join(commands(Path(sys.argv[1] if len(sys.argv) > 1 else "README.md").read_text())))
