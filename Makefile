# Two commands on a fresh machine: `make dataset` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install dataset test test-slow lint fuzz bench bench-scale clean browser docs docs-serve docs-test

install: $(STAMP)

# torch first and pinned: 2.13.0 is the CPU wheel these machines carry on disk; an unpinned
# torch would pull a multi-GB CUDA build. setup.py builds the optional C extensions
# loaders._jpegroi (needs a C compiler and libjpeg-turbo's headers; skipped without them) and
# prep._quality and prep._csv (a C compiler).
$(STAMP): pyproject.toml setup.py loaders/_jpegroi.c prep/_quality.c prep/_csv.c prep/_csv_cells.h
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,media]'
	touch $(STAMP)

data/demo-raw/.done: $(STAMP) prep/demo/images.py
	rm -rf data/demo-raw
	$(BIN)/prep demo data/demo-raw
	touch $@

data/demo-ct/.done: $(STAMP) prep/demo/volumes.py
	rm -rf data/demo-ct
	$(BIN)/prep demo --volumes data/demo-ct
	touch $@

data/demo-audio/.done: $(STAMP) prep/demo/audio.py
	rm -rf data/demo-audio
	$(BIN)/prep demo --audio data/demo-audio
	touch $@

data/demo-video/.done: $(STAMP) prep/demo/video.py
	rm -rf data/demo-video
	$(BIN)/prep demo --video data/demo-video
	touch $@

dataset: $(STAMP) data/demo-raw/.done data/demo-ct/.done data/demo-audio/.done data/demo-video/.done
	$(BIN)/prep pack --config configs/default.toml --overwrite
	$(BIN)/prep verify data/demo-packed
	$(BIN)/prep info data/demo-packed
	$(BIN)/prep tokenize --config configs/default.toml --overwrite
	$(BIN)/prep verify data/demo-tokens
	$(BIN)/prep info data/demo-tokens
	$(BIN)/prep volumes data/demo-ct/images data/demo-volumes --labels data/demo-ct/labels \
		--spacing 1.5,1.5,1.5 --window -1000,400 --crop-foreground --overwrite -q
	$(BIN)/prep verify data/demo-volumes
	$(BIN)/prep info data/demo-volumes
	$(BIN)/prep table data/demo-raw/table/houses.csv data/demo-table --target price --drop id \
		--val-fraction 0.1 --overwrite -q
	$(BIN)/prep verify data/demo-table
	$(BIN)/prep info data/demo-table
	$(BIN)/prep samples data/demo-raw/detection.jsonl data/demo-samples \
		--recipe recipes/detection.py --overwrite -q
	$(BIN)/prep verify data/demo-samples
	$(BIN)/prep info data/demo-samples
	$(BIN)/prep import coco data/demo-raw/coco.json data/demo-raw/images data/demo-coco \
		--sizes 256 --mode keep --codec jpeg --masks --overwrite -q
	$(BIN)/prep verify data/demo-coco
	$(BIN)/prep info data/demo-coco
	$(BIN)/prep import pairs data/demo-raw/captions.csv data/demo-pairs --image-column path \
		--text-column caption --sizes 224 --overwrite -q
	$(BIN)/prep verify data/demo-pairs
	$(BIN)/prep info data/demo-pairs
	$(BIN)/prep import hf data/demo-raw/hf data/demo-hf --sizes 128 --overwrite -q
	$(BIN)/prep verify data/demo-hf
	$(BIN)/prep info data/demo-hf
	$(BIN)/prep import webdataset 'data/demo-raw/wds/shard-{000000..000001}.tar' data/demo-wds \
		--sizes 128 --overwrite -q
	$(BIN)/prep verify data/demo-wds
	$(BIN)/prep info data/demo-wds
	$(BIN)/prep pack data/demo-raw/tree data/demo-splits --sizes 128 --splits train,val \
		--overwrite -q
	$(BIN)/prep verify data/demo-splits
	$(BIN)/prep info data/demo-splits
	$(BIN)/prep audio data/demo-audio data/demo-audio-packed --rate 16000 --mono --overwrite -q
	$(BIN)/prep verify data/demo-audio-packed
	$(BIN)/prep info data/demo-audio-packed
	$(BIN)/prep video data/demo-video data/demo-clips --fps 8 --size 64 --codec jpeg --overwrite -q
	$(BIN)/prep verify data/demo-clips
	$(BIN)/prep info data/demo-clips
	@echo
	@echo "Packed dataset: data/demo-packed. Load it in training with:"
	@echo "  from loaders import ImageShardDataset, make_loader"
	@echo "  ds = ImageShardDataset('data/demo-packed', size=256, fields=('image', 'label'))"
	@echo "  loader = make_loader(ds, batch_size=64, shuffle=True, num_workers=2)"
	@echo "Token dataset: data/demo-tokens. Load it with:"
	@echo "  from loaders import TokenWindowDataset"
	@echo "  ds = TokenWindowDataset('data/demo-tokens', block_size=256, split='train')"
	@echo "Volume dataset: data/demo-volumes. Load patches with:"
	@echo "  from loaders import PatchDataset"
	@echo "  ds = PatchDataset('data/demo-volumes', patch=(48, 48, 48), per_volume=4)"
	@echo "Table dataset: data/demo-table. Load it with:"
	@echo "  from loaders import TableDataset"
	@echo "  ds = TableDataset('data/demo-table', split='train')   # (x_num, x_cat, y) batches"
	@echo "Detection samples: data/demo-samples. Load them with:"
	@echo "  from loaders import SampleDataset, CenterCrop"
	@echo "  ds = SampleDataset('data/demo-samples', crop=CenterCrop(224))   # dict batches"
	@echo "Imported COCO and caption pairs: data/demo-coco, data/demo-pairs. Load them with:"
	@echo "  ds = SampleDataset('data/demo-coco', crop=CenterCrop(224))   # boxes follow the crop"
	@echo "  ds = SampleDataset('data/demo-pairs')   # image, caption"
	@echo "Imported Hugging Face Parquet and WebDataset tars: data/demo-hf, data/demo-wds; a"
	@echo "train/val tree packed: data/demo-splits. Load them with:"
	@echo "  ds = SampleDataset('data/demo-hf', split='train')   # image, label, text"
	@echo "  norm = Normalize.from_dataset(ds)   # the train split's mean and std"
	@echo "  ds = ImageShardDataset('data/demo-splits', size=128, split='val')"
	@echo "Audio clips: data/demo-audio-packed. Load 1 s windows with:"
	@echo "  from loaders import AudioDataset"
	@echo "  ds = AudioDataset('data/demo-audio-packed', seconds=1.0, seed=0)   # int16 + label"
	@echo "Video clips: data/demo-clips. Load 8-frame clips with:"
	@echo "  from loaders import ClipDataset, RandomResizedCrop"
	@echo "  ds = ClipDataset('data/demo-clips', frames=8, crop=RandomResizedCrop(48), seed=0)"

lint: $(STAMP)
	$(BIN)/ruff check prep loaders tests bench examples
	$(BIN)/ruff format --check prep loaders tests bench examples
	$(BIN)/mypy

test: $(STAMP) lint browser
	$(BIN)/python -m pytest -m "not docs and not slow"

# The slow end-to-end tests (killed runs, real gloo ranks, 50 appends from another process, the
# hostile corpus, the examples): CI runs them after make test.
test-slow: $(STAMP) browser
	$(BIN)/python -m pytest -m "slow and not docs"

# tests/test_report_browser.py opens prep report in Debian's headless chromium: installed here
# where it is missing and apt-get can (root, a package mirror); else that test skips, saying why.
browser:
	@(command -v chromium && command -v chromedriver) >/dev/null 2>&1 || \
		! command -v apt-get >/dev/null 2>&1 || \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
		(DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1) || \
		echo "chromium not installed: tests/test_report_browser.py will skip"

# The fuzz targets of tests/test_fuzz.py (.npy headers, .h5 shards, manifests, the shard index,
# JPEG samples) and tests/test_fuzz_importers.py (COCO JSON and segmentations, caption rows,
# Hugging Face JSON and features, WebDataset tars and patterns), each for FUZZ_SECONDS instead
# of make test's 0.5 s; FUZZ_SEED=N starts elsewhere. A failure saves its input and prints how
# to rerun it.
FUZZ_SECONDS ?= 300
FUZZ_SEED ?= 0
fuzz: $(STAMP)
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_SEED=$(FUZZ_SEED) $(BIN)/python -m pytest \
		tests/test_fuzz.py tests/test_fuzz_importers.py

# compileall: the bytecode a pip install writes; an editable checkout under
# PYTHONDONTWRITEBYTECODE=1 never caches it, and every `prep` the rows start would compile
# ~70 modules again (0.3-0.6 s), a cost no installed copy pays. Quick when they are current.
bench: $(STAMP)
	$(BIN)/python -m compileall -q prep loaders
	$(BIN)/python bench/bench.py

# The ImageNet-shape rehearsal (1,281,167 generated 32 px images; under 20 minutes on 2 cores):
# SCALE=0.01 runs 1% of it.
SCALE ?= 1
bench-scale: $(STAMP)
	$(BIN)/python bench/scale.py --scale $(SCALE)

clean:
	rm -rf $(VENV) data site .pytest_cache .mypy_cache .ruff_cache *.egg-info

# Everything the GPU runs, measured on the first CUDA machine (bench/gpu_check.py): the CUDA
# tests, decode="cuda" against the CPU, each transform's ms per batch and 200 training steps,
# in one table (printed, and written to bench/out/gpu-check.md). Without CUDA: the CPU's numbers,
# labelled so (DEVICE=cpu asks for them). The system's python3 runs it where .venv is absent.
.PHONY: gpu-check gpu-wheels
GPU_PY = $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
gpu-check:
	$(GPU_PY) bench/gpu_check.py $(if $(DEVICE),--device $(DEVICE))

# What gpu-check installs on a bare CUDA machine's Python 3.12 (torch and numpy assumed there),
# as wheels in wheels/ (17 MB): torchvision of the torch it runs with (TORCHVISION), without
# dependencies. OpenCV's wheel alone is 62 MB, past a 64 MiB tree: GPU_WHEELS_EXTRA=
# opencv-python-headless adds it for a machine that lacks cv2.
TORCHVISION ?= 0.28.0
GPU_WHEELS_EXTRA ?=
gpu-wheels:
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d wheels \
		torchvision==$(TORCHVISION) simplejpeg pillow typer click rich shellingham \
		markdown-it-py mdurl pygments typing-extensions tqdm joblib psutil pytest iniconfig \
		pluggy packaging $(GPU_WHEELS_EXTRA)
	du -sh wheels

# The documentation site (mkdocs.yml): --strict fails on a broken link or anchor, a page missing
# from docs/, or a docstring mkdocstrings cannot read. The CLI and API pages are made from the
# code as it builds (docs/hooks/). docs-serve rebuilds on each edit, at http://127.0.0.1:8000.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# Every python and bash block of README.md and docs/*.md, run in a copy of the repository after
# the demo data is made (as make dataset makes it), the docstring examples, and the strict build:
# about 5 minutes on 2 cores, so not in make test; CI runs it.
docs-test: $(STAMP)
	$(BIN)/python -m pytest -m docs tests/test_docs.py
