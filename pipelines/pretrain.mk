# The paper's pretraining (BERT, appendix A.2): 90% of the steps on 128-token sequences with up
# to 20 predictions each, then the last 10% on 512-token sequences with up to 80, continuing
# the first phase's weights and learning-rate schedule.
#
#   make -C pipelines pretrain CORPUS=~/corpus MODEL_SIZE=base STEPS=1000000 NPROC=8
#   make -C pipelines -f pretrain.mk pretrain CORPUS=...      (the same, without the top Makefile)
#
# Artifacts, each the target `make` keeps up to date (a second `make` does nothing):
#   RUNS/tokenizer   bertctl tokenize CORPUS (or --from-vocab VOCAB)
#   RUNS/data1       build-pretrain-data at SEQ1 tokens, PRED1 predictions per sequence
#   RUNS/data2       build-pretrain-data at SEQ2 tokens, PRED2 predictions per sequence
#   RUNS/phase1      pretrain on data1 from scratch: steps 1 .. 90% of STEPS, schedule of STEPS
#   RUNS/phase2      pretrain on data2 --init-from phase1 --continue-schedule: the last 10%
# Targets: pretrain (phase2), pretrain-data (the tokenizer and both data sets), pretrain-clean.
#
# Variables (paths relative to the directory make was started from, or absolute):
#   CORPUS       corpus files, globs or directories (Google's format: one sentence per line, a
#                blank line between documents), as `bertctl tokenize` takes them
#   VOCAB        import this vocab.txt instead of training a tokenizer (unset: train one)
#   VOCAB_SIZE   the trained vocabulary (default 30522)
#   MODEL_SIZE   tiny, mini, small, medium, base (default) or large
#   STEPS        optimizer steps over both phases (default 1000000); phase 1 makes 90% of them
#   BATCH        sequences per step (default 256); BATCH2 for phase 2 (default BATCH)
#   LR           peak learning rate (default: the CLI's, 1e-4 as the paper)
#   SEQ1, PRED1  phase 1's sequence length and predictions per sequence (default 128, 20)
#   SEQ2, PRED2  phase 2's (default 512, 80)
#   DUPE         passes over the corpus with different masks (default: the CLI's, 10)
#   VALIDATION   share of documents held out for validation (default: the CLI's, none)
#   PRECISION    passed to pretrain when set (default: the CLI's)
#   TOKENIZE_FLAGS, DATA_FLAGS   more flags for tokenize / both build-pretrain-data runs
#   MODEL_FLAGS  phase 1's model flags (--hidden-size ..., --model-config FILE)
#   PRETRAIN_FLAGS  more flags for both pretrain runs (--log-every, --checkpoint-every, ...)
#   NPROC        processes per node (default 1); NNODES nodes (default 1). With either above 1
#                the pretrain runs go through torchrun: --standalone on one node; across nodes
#                with the rendezvous RDZV_ENDPOINT (host:port, default localhost:29500),
#                RDZV_ID (default bertctl-pretrain) and RDZV_BACKEND (default c10d).
#   NODE_RANK    across nodes: this node's number (default 0). Run the same `make` on every
#                node with RUNS on a shared file system; node 0 builds the tokenizer and data,
#                the others wait for them (up to WAIT seconds, default 86400). Each phase's
#                torchrun returns on every node once rank 0 has written its artifact.
#   TORCHRUN     the torchrun command (default: .venv's when `make setup` made it, else torchrun)
#   RUNS         where the artifacts go (default runs/pretrain)
#   BERTCTL      the bertctl command (default: .venv's when `make setup` made it, else bertctl)

ROOT     := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
VENV_BIN := $(ROOT)/.venv/bin
BERTCTL  ?= $(if $(wildcard $(VENV_BIN)/bertctl),$(VENV_BIN)/bertctl,bertctl)
RUNS     ?= $(ROOT)/runs/pretrain
VOCAB    ?=
VOCAB_SIZE ?= 30522
MODEL_SIZE ?= base
STEPS    ?= 1000000
BATCH    ?= 256
BATCH2   ?= $(BATCH)
LR       ?=
SEQ1     ?= 128
PRED1    ?= 20
SEQ2     ?= 512
PRED2    ?= 80
DUPE     ?=
VALIDATION ?=
PRECISION ?=
TOKENIZE_FLAGS ?=
DATA_FLAGS ?=
MODEL_FLAGS ?=
PRETRAIN_FLAGS ?=

include $(ROOT)/pipelines/paths.mk
include $(ROOT)/pipelines/launch.mk
$(call resolve,CORPUS VOCAB RUNS)

ifeq ($(filter pretrain-clean,$(MAKECMDGOALS)),)
ifeq ($(strip $(CORPUS)),)
$(error CORPUS= is required: the corpus files or directories to pretrain on)
endif
$(call must_exist,CORPUS VOCAB)
ifneq ($(shell test "$(STEPS)" -ge 2 2>/dev/null && echo ok),ok)
$(error STEPS=$(STEPS): give a whole number of optimizer steps, at least 2)
endif
endif

# 90% of the steps, at least one, and at least one left for phase 2.
STEPS1 := $(shell s=$$(( $(STEPS) * 9 / 10 )); [ $$s -lt 1 ] && s=1; [ $$s -ge $(STEPS) ] && s=$$(( $(STEPS) - 1 )); echo $$s)
STEPS2 := $(shell echo $$(( $(STEPS) - $(STEPS1) )))

# A make dependency per corpus file, directories searched as tokenize searches them.
CORPUS_FILES := $(foreach c,$(CORPUS),$(if $(wildcard $(c)/.),$(shell find $(c) -type f),$(wildcard $(c))))

TRAIN_ARGS  := $(if $(LR),--lr $(LR)) $(if $(PRECISION),--precision $(PRECISION)) $(PRETRAIN_FLAGS)
DATA_ARGS   := $(if $(DUPE),--dupe-factor $(DUPE)) \
               $(if $(VALIDATION),--validation-fraction $(VALIDATION)) $(DATA_FLAGS)

.PHONY: pretrain pretrain-data pretrain-clean
pretrain: $(RUNS)/phase2/artifact.json
pretrain-data: $(RUNS)/data1/artifact.json $(RUNS)/data2/artifact.json

$(RUNS)/tokenizer/artifact.json: $(CORPUS_FILES) $(VOCAB)
	$(call on_node0,$(BERTCTL) tokenize $(CORPUS) $(if $(VOCAB),--from-vocab $(VOCAB),\
	    --vocab-size $(VOCAB_SIZE)) $(TOKENIZE_FLAGS) --out $(@D) --force)

$(RUNS)/data1/artifact.json: $(RUNS)/tokenizer/artifact.json $(CORPUS_FILES)
	$(call on_node0,$(BERTCTL) build-pretrain-data $(<D) $(CORPUS) --max-seq-length $(SEQ1) \
	    --max-predictions-per-seq $(PRED1) $(DATA_ARGS) --out $(@D) --force)

$(RUNS)/data2/artifact.json: $(RUNS)/tokenizer/artifact.json $(CORPUS_FILES)
	$(call on_node0,$(BERTCTL) build-pretrain-data $(<D) $(CORPUS) --max-seq-length $(SEQ2) \
	    --max-predictions-per-seq $(PRED2) $(DATA_ARGS) --out $(@D) --force)

$(RUNS)/phase1/artifact.json: $(RUNS)/data1/artifact.json
	$(PRETRAIN) $(<D) --model-size $(MODEL_SIZE) $(MODEL_FLAGS) --steps $(STEPS1) \
	    --total-steps $(STEPS) --batch-size $(BATCH) $(TRAIN_ARGS) --out $(@D) --force
	$(if $(MULTINODE),$(wait_shared))

$(RUNS)/phase2/artifact.json: $(RUNS)/data2/artifact.json $(RUNS)/phase1/artifact.json
	$(PRETRAIN) $(<D) --init-from $(RUNS)/phase1 --continue-schedule --steps $(STEPS2) \
	    --batch-size $(BATCH2) $(TRAIN_ARGS) --out $(@D) --force
	$(if $(MULTINODE),$(wait_shared))

pretrain-clean:
	rm -rf $(RUNS)
