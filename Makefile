# The two commands of the README:
#   make demo   set up .venv, compile MobileNetV2 for the default NPU, simulate it, check it
#               against PyTorch and print the per-layer profile
#   make test   set up .venv and run the whole test suite (model zoo included)
#   make fuzz   long fuzzing runs (SEED=.. COUNT=..)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.npuc-installed

.PHONY: demo test bench fuzz clean

# constraints.txt pins the exact versions npuc is tested with; pyproject.toml declares ranges.
$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/npuc demo

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup -q --durations=25

# make fuzz SEED=1000 COUNT=5000: random graphs against PyTorch eager (interpreter, fp16 and int8
# on the NPU) and structure-edited binaries against the loader; failures print reproducers
SEED ?= 0
COUNT ?= 1000
fuzz: $(STAMP)
	$(PY) -m npuc.fuzz all --seed $(SEED) --count $(COUNT)

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
