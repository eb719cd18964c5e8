# Two commands do all set-up on a fresh machine (Python 3.11, Node 20 or later, npm; make brings Node 22 and the CDK CLI):
#   make run    synthesize every environment (cdk-nag included), then run the whole system
#               locally on moto: provisioning from the demo template, consumers, a producer,
#               a DLQ redrive and the accounting report (exit 1 if anything is lost)
#   make test   run the test suite (make test-images: the container tier, the images built and run)
# Evidence (not needed by the two above): make bench (docs/evidence/BENCHMARKS.md), make chaos (docs/evidence/CHAOS.md),
#   make seeds (docs/testing.md: every seed of the simulated world, where make test runs a sample),
#   make peers (docs/evidence/BENCHMARKS.md, section 10: Celery, Dramatiq, sqs-workers, sqs-consumer
#   beside ours; ~38 min)
# make image: build the consumer image as `cdk deploy` does, with Docker or else podman (docs/deploy.md, "Building the image")
# Deploying (docs/deploy.md): make synth|diff|deploy ENV=staging, with the venv and the pinned CLI brought here.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.installed
CLI_STAMP := node_modules/.installed
BENCH_STAMP := $(VENV)/.bench-installed
# The pinned Node (package.json: npm serves Node 22 LTS as a package) first on PATH for everything make runs and
# what that spawns (jsii under python, npx cdk, tests running the CLI): the machine's Node may be 20, which jsii
# calls end-of-life with a banner on every synth. Any target that synthesizes therefore needs $(CLI_STAMP).
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
# Bytecode is cached under the venv for every Python process make starts, also where the environment says not to
# write it beside the sources (PYTHONDONTWRITEBYTECODE, set on some machines): uv installs without compiling, and
# without a cache each of the suite's processes compiled aws_cdk's generated modules anew (3 s of CPU each).
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
export AWS_EC2_METADATA_DISABLED := true

# pip-tools resolves consumer/requirements.txt into the hashed consumer/requirements.lock (make lock), then the
# examples' requirements.txt under that lock (-c) and the team's (workers/) under both, so the locks never disagree;
# consumer/local/lock.py runs it and says a conflict with a lock in one line, naming both pins and their files.
PIP_TOOLS := pip-tools==7.6.2
# What the image installs, in one pip call as the Dockerfile does: the framework's runtime, the example handlers'
# dependencies and the team package's (workers/).
LOCKS := consumer/requirements.lock consumer/examples/requirements.lock workers/requirements.lock

.PHONY: run test test-images seeds synth diff deploy image bench peers chaos lock clean

run: $(PY_STAMP) $(CLI_STAMP)
	$(PY) -m infra.report
	$(PY) -m consumer demo $(DEMO_ARGS)

# The suite on one pytest-xdist worker per core (-n auto), a test file to a worker (pyproject.toml's --dist loadfile)
# so a module's fixtures run once.
# Not in it: the lab's runs (`pytest -m lab`) and the image builds (make test-images).
test: $(PY_STAMP) $(CLI_STAMP)
	$(PY) -m pytest -n auto -m "not lab" --ignore=tests/container

# The container tier (tests/container): the consumer image built from the synthesized asset as `cdk deploy` builds
# it, for linux/amd64 and, where qemu is registered, linux/arm64 (minutes of emulation), each run as ECS runs its
# task. .ci/run runs it after make test, with a container engine it provides (.ci/container-engine).
test-images: $(PY_STAMP) $(CLI_STAMP)
	$(PY) -m pytest tests/container

# The simulated world's whole sweep (docs/testing.md): SEEDS seeds from SEEDS_START, each drawing its own plan; make test
# runs a fixed sample of them (tests/sim/test_seeds.py). A failing seed prints the command that replays it.
# TARGET=lambda: the worker as a Lambda function behind an event source mapping (tests/sim/test_lambda_seeds.py).
SEEDS ?= 520
SEEDS_START ?= 0
TARGET ?= container
seeds: $(PY_STAMP)
	$(PY) -m bench.simulate --seeds $(SEEDS) --start $(SEEDS_START) --target $(TARGET)

# The pinned CDK CLI (node_modules/.bin is on PATH). cdk.json's app is `python3 app.py`: the venv's bin goes
# first so it finds the installed CDK, as an activated venv would. ENV picks one environment of cdk.json
# (synth and diff: every environment without it); CDK_ARGS passes more options, e.g. --parameters.
CDK := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" cdk
# diff and deploy talk to AWS: they may need the instance metadata service for credentials (an EC2 runner).
CDK_AWS := env -u AWS_EC2_METADATA_DISABLED $(CDK)
# Before either synthesizes (a minute, then the CLI's "Unable to resolve AWS account"): one line naming what is
# missing and how to provide it, from botocore's credential chain in the same environment (consumer/local/credentials.py).
CHECK_CREDENTIALS := env -u AWS_EC2_METADATA_DISABLED $(PY) -m consumer.local.credentials

synth: $(PY_STAMP) $(CLI_STAMP)
	$(CDK) synth -q --no-notices $(if $(ENV),-c env=$(ENV)) $(CDK_ARGS)

diff: $(PY_STAMP) $(CLI_STAMP)
	@$(CHECK_CREDENTIALS) make diff
	$(CDK_AWS) diff --no-notices $(if $(ENV),-c env=$(ENV)) $(CDK_ARGS)

deploy: $(PY_STAMP) $(CLI_STAMP)
	@$(CHECK_CREDENTIALS) make deploy
	$(CDK_AWS) deploy --no-notices -c env=$(or $(ENV),$(error make deploy needs ENV=<an environment of cdk.json>)) $(CDK_ARGS)

image: $(PY_STAMP) $(CLI_STAMP)
	$(PY) -m consumer.local.image

# The harness's own end-to-end tests first (tests/integration/test_bench.py, the lab tier), then the measurements.
bench: $(BENCH_STAMP) $(CLI_STAMP)
	$(PY) -m pytest -q -m lab tests/integration/test_bench.py
	$(PY) -m bench all $(BENCH_ARGS)

# The peers table: each peer installed into its own environment under .bench/peers/ from bench/peers/*-requirements.txt
# and bench/peers/sqs-consumer/package-lock.json (once), run on Node 22 from $(CLI_STAMP). PEERS_ARGS: e.g. --rounds 5.
peers: $(BENCH_STAMP) $(CLI_STAMP)
	$(PY) -m bench peers $(PEERS_ARGS)

chaos: $(PY_STAMP) $(CLI_STAMP)
	$(PY) -m infra.report
	$(PY) -m bench.chaos $(CHAOS_ARGS)

$(BENCH_STAMP): bench/requirements.txt $(PY_STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -r bench/requirements.txt
	touch $@

# The image's locked versions first, hashes checked, so tests run on exactly what the image installs. uv installs
# them (pinned, itself installed by pip): the same locks and hashes as pip, in seconds where pip took a minute and a
# half (most of it compiling every module to bytecode up front; uv leaves that to the first import).
UV := uv==0.13.9
$(PY_STAMP): requirements.txt requirements-dev.txt $(LOCKS:.lock=.txt) $(LOCKS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(UV)
	$(VENV)/bin/uv pip install --quiet --python $(PY) --require-hashes $(addprefix -r ,$(LOCKS))
	$(VENV)/bin/uv pip install --quiet --python $(PY) -r requirements-dev.txt
	touch $@

# Re-resolve after changing a requirements.txt of $(LOCKS) (needs the package index); commit each pair, and
# consumer/local/lock_files.json: which file each locked hash is, so a test proves offline that every pin installs on
# linux/amd64 and linux/arm64 (consumer/local/lock_wheels.py; `... lock_wheels check` asks the index itself).
lock: $(PY_STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check $(PIP_TOOLS)
	$(PY) -m consumer.local.lock
	$(PY) -m consumer.local.lock_wheels record

$(CLI_STAMP): package.json package-lock.json
	npm install --no-audit --no-fund --loglevel=error
	touch $@

clean:
	rm -rf $(VENV) node_modules cdk.out .pytest_cache .demo .bench .chaos
