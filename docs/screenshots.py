"""Screenshots of the built docs site in headless Chromium, in the light and the dark scheme.

    NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir build/site
    .venv/bin/python docs/screenshots.py [build/site] [build/screenshots]

It serves the site on localhost (`python -m http.server`) and saves one PNG per page and scheme in
build/screenshots/ (Debian: `apt-get install chromium`). Chromium runs with everything that would
reach the network switched off; the site itself loads nothing from another host (docs/check_site.py).
"""

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: (file name, page): pages with math, notebooks with math, wide code and folded solutions, the course's
#: index, and pages with figures
PAGES = (
    ("speculative", "strategies/speculative/"),
    ("jacobi", "strategies/jacobi/"),
    ("notebook-03", "tutorials/03_speculative/"),
    ("notebook-04", "tutorials/04_jacobi_and_lookahead/"),
    ("notebook-06", "tutorials/06_mtad/"),
    ("tutorials", "tutorials/"),
    ("lookahead", "strategies/lookahead/"),
    ("eagle", "strategies/eagle/"),
    ("masks", "concepts/masks/"),
    ("benchmark", "benchmark/"),
)
#: Blink's preferred colour scheme: 0 is dark, 1 is light (mkdocs-material follows it on a first visit)
SCHEMES = {"light": 1, "dark": 0}
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--virtual-time-budget=5000",
)
#: pages whose end is shot too: the notebooks' graded exercises (folded solutions, check cells) sit at the bottom,
#: so the page is drawn in a window this tall and the picture keeps its last `EXERCISE_HEIGHT` pixels
ENDS = (("notebook-07-exercises", "tutorials/07_your_own_strategy/", 16000),
        ("notebook-04-exercises", "tutorials/04_jacobi_and_lookahead/", 12000))
EXERCISE_HEIGHT = 2600


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(site: Path, port: int) -> subprocess.Popen:
    """`python -m http.server` on `site`, once it answers."""
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"the server on port {port} did not start")


def screenshot(chromium: str, url: str, path: Path, scheme: int, height: int = 2000) -> None:
    """One headless Chromium screenshot of `url` into `path`, in a fresh profile and a 1280 x `height` window."""
    with tempfile.TemporaryDirectory() as profile:
        flags = [*CHROMIUM_FLAGS, f"--window-size=1280,{height}", f"--user-data-dir={profile}",
                 f"--blink-settings=preferredColorScheme={scheme}"]  # fmt: skip
        subprocess.run([chromium, *flags, f"--screenshot={path}", url], check=True, capture_output=True, timeout=120)


def keep_bottom(path: Path, height: int) -> None:
    """Crop a screenshot to the last `height` pixels of the page's content: the footer sits at the window's bottom,
    with white between it and the content's end when the page is shorter than the window."""
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        gray = np.asarray(image.convert("L"))
        row = len(gray) - 1
        while row > 0 and gray[row].mean() < 128:  # the dark footer
            row -= 1
        while row > 0 and gray[row].min() > 245:  # white below the content
            row -= 1
        bottom = min(len(gray), row + 40)
        image.crop((0, max(0, bottom - height), image.width, bottom)).save(path)


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else "build/site")
    out = Path(argv[1] if len(argv) > 1 else "build/screenshots")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("no chromium on PATH (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = serve(site, port)
    try:
        for name, page in PAGES:
            for scheme, value in SCHEMES.items():
                path = out / f"{name}-{scheme}.png"
                screenshot(chromium, f"http://127.0.0.1:{port}/{page}", path, value)
                print(path)
        for name, page, height in ENDS:
            path = out / f"{name}-light.png"
            screenshot(chromium, f"http://127.0.0.1:{port}/{page}", path, SCHEMES["light"], height)
            keep_bottom(path, EXERCISE_HEIGHT)
            print(path)
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
