# ModernBERT's pretraining: masked LM at 30% under a warm-up-stable-decay schedule; a stable
# phase on SEQ1-token rows with the global layers' rotary base at THETA1; the context extension,
# which continues the stable phase's schedule and optimizer on SEQ2-token rows, declaring SEQ2
# positions with the base raised to THETA2 (rotary positions have no table: no weight changes
# shape); and the decay, branched from the extended model on the same rows. ModernBERT trained
# at 1024 tokens with 10,000, then at 8192 with 160,000.
#
#   make -C pipelines modern CORPUS=~/corpus MODEL_SIZE=base STEPS=100000 NPROC=8
#   make -C pipelines -f modern.mk modern CORPUS=...      (the same, without the top Makefile)
#
# Artifacts, each the target `make` keeps up to date (a second `make` does nothing):
#   RUNS/tokenizer   bertctl tokenize CORPUS (or --from-vocab VOCAB)
#   RUNS/data1       build-pretrain-data at SEQ1 tokens (continuous text, dynamic masks)
#   RUNS/data2       build-pretrain-data at SEQ2 tokens
#   RUNS/stable      pretrain on data1 from scratch: warm-up and the stable steps of STEPS
#   RUNS/extended    pretrain on data2 --init-from stable --continue-schedule: EXTEND steps,
#                    SEQ2 positions, rotary base THETA2
#   RUNS/model       pretrain on data2 --init-from extended --continue-schedule: the DECAY steps
# Targets: modern (the model), modern-extended (without the decay), modern-clean. More decays
# branch from RUNS/extended by hand: bertctl pretrain RUNS/data2 --init-from RUNS/extended
# --continue-schedule --schedule wsd --steps N --total-steps M --decay N --out ... .
#
# Variables (paths relative to the directory make was started from, or absolute):
#   CORPUS       corpus files, globs or directories, as `bertctl tokenize` takes them
#   VOCAB        import this vocab.txt instead of training a tokenizer (unset: train one)
#   VOCAB_SIZE   the trained vocabulary (default 50368, ModernBERT's)
#   MODEL_SIZE   a modernbert size (tiny ... base, large; default base)
#   STEPS        optimizer steps over the three phases (default 100000)
#   EXTEND       the context extension's steps (default 10% of STEPS)
#   DECAY        the decay's steps (default 10% of STEPS); the stable phase makes the rest
#   BATCH        sequences per step in the stable phase (default 256); BATCH2 at SEQ2 (default
#                BATCH * SEQ1 / SEQ2, at least 1: the same tokens per step)
#   LR           peak learning rate (default 8e-4, ModernBERT-base's); WARMUP (default 0.06)
#   MASK_RATE    share of tokens masked (default 0.3)
#   SEQ1, SEQ2   the rows' lengths (default 1024, 8192); THETA1, THETA2 the rotary bases of the
#                global layers (default 10000, 160000)
#   VALIDATION, PRECISION, TOKENIZE_FLAGS, DATA_FLAGS, MODEL_FLAGS, PRETRAIN_FLAGS,
#   NPROC, NNODES, NODE_RANK, RDZV_*, TORCHRUN, WAIT, RUNS (default runs/modern), BERTCTL
#                as in pretrain.mk

ROOT     := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
VENV_BIN := $(ROOT)/.venv/bin
BERTCTL  ?= $(if $(wildcard $(VENV_BIN)/bertctl),$(VENV_BIN)/bertctl,bertctl)
RUNS     ?= $(ROOT)/runs/modern
VOCAB    ?=
VOCAB_SIZE ?= 50368
MODEL_SIZE ?= base
STEPS    ?= 100000
BATCH    ?= 256
LR       ?= 8e-4
WARMUP   ?= 0.06
MASK_RATE ?= 0.3
SEQ1     ?= 1024
SEQ2     ?= 8192
THETA1   ?= 10000
THETA2   ?= 160000
VALIDATION ?=
PRECISION ?=
TOKENIZE_FLAGS ?=
DATA_FLAGS ?=
MODEL_FLAGS ?=
PRETRAIN_FLAGS ?=

include $(ROOT)/pipelines/paths.mk
include $(ROOT)/pipelines/launch.mk
$(call resolve,CORPUS VOCAB RUNS)

whole = $(shell test "$(1)" -ge $(2) 2>/dev/null && echo ok)
ifeq ($(filter modern-clean,$(MAKECMDGOALS)),)
ifeq ($(strip $(CORPUS)),)
$(error CORPUS= is required: the corpus files or directories to pretrain on)
endif
$(call must_exist,CORPUS VOCAB)
ifneq ($(call whole,$(STEPS),3),ok)
$(error STEPS=$(STEPS): give a whole number of optimizer steps, at least 3)
endif
endif

EXTEND   ?= $(shell s=$$(( $(STEPS) / 10 )); [ $$s -lt 1 ] && s=1; echo $$s)
DECAY    ?= $(shell s=$$(( $(STEPS) / 10 )); [ $$s -lt 1 ] && s=1; echo $$s)
STABLE   := $(shell echo $$(( $(STEPS) - $(EXTEND) - $(DECAY) )))
BATCH2   ?= $(shell s=$$(( $(BATCH) * $(SEQ1) / $(SEQ2) )); [ $$s -lt 1 ] && s=1; echo $$s)
ifeq ($(filter modern-clean,$(MAKECMDGOALS)),)
ifneq ($(and $(call whole,$(EXTEND),1),$(call whole,$(DECAY),1),$(call whole,$(STABLE),1)),ok)
$(error EXTEND=$(EXTEND) DECAY=$(DECAY): each at least 1, leaving at least 1 of STEPS=$(STEPS) for the stable phase)
endif
endif

CORPUS_FILES := $(foreach c,$(CORPUS),$(if $(wildcard $(c)/.),$(shell find $(c) -type f),$(wildcard $(c))))

# Every phase names the same schedule (the continued runs refuse another).
SCHEDULE    := --objective mlm --schedule wsd --decay $(DECAY) --lr $(LR) --warmup $(WARMUP) \
               --mask-rate $(MASK_RATE)
TRAIN_ARGS  := $(SCHEDULE) $(if $(PRECISION),--precision $(PRECISION)) $(PRETRAIN_FLAGS)
DATA_ARGS   := --no-nsp --masking dynamic --packing full-sentences \
               $(if $(VALIDATION),--validation-fraction $(VALIDATION)) $(DATA_FLAGS)

.PHONY: modern modern-extended modern-clean
modern: $(RUNS)/model/artifact.json
modern-extended: $(RUNS)/extended/artifact.json

$(RUNS)/tokenizer/artifact.json: $(CORPUS_FILES) $(VOCAB)
	$(call on_node0,$(BERTCTL) tokenize $(CORPUS) $(if $(VOCAB),--from-vocab $(VOCAB),\
	    --vocab-size $(VOCAB_SIZE)) $(TOKENIZE_FLAGS) --out $(@D) --force)

$(RUNS)/data1/artifact.json: $(RUNS)/tokenizer/artifact.json $(CORPUS_FILES)
	$(call on_node0,$(BERTCTL) build-pretrain-data $(<D) $(CORPUS) --max-seq-length $(SEQ1) \
	    $(DATA_ARGS) --out $(@D) --force)

$(RUNS)/data2/artifact.json: $(RUNS)/tokenizer/artifact.json $(CORPUS_FILES)
	$(call on_node0,$(BERTCTL) build-pretrain-data $(<D) $(CORPUS) --max-seq-length $(SEQ2) \
	    $(DATA_ARGS) --out $(@D) --force)

$(RUNS)/stable/artifact.json: $(RUNS)/data1/artifact.json
	$(PRETRAIN) $(<D) --architecture modernbert --model-size $(MODEL_SIZE) $(MODEL_FLAGS) \
	    --max-position-embeddings $(SEQ1) --rope-theta $(THETA1) --steps $(STABLE) \
	    --total-steps $(STEPS) --batch-size $(BATCH) $(TRAIN_ARGS) --out $(@D) --force
	$(if $(MULTINODE),$(wait_shared))

$(RUNS)/extended/artifact.json: $(RUNS)/data2/artifact.json $(RUNS)/stable/artifact.json
	$(PRETRAIN) $(<D) --init-from $(RUNS)/stable --continue-schedule --steps $(EXTEND) \
	    --max-position-embeddings $(SEQ2) --rope-theta $(THETA2) --batch-size $(BATCH2) \
	    $(TRAIN_ARGS) --out $(@D) --force
	$(if $(MULTINODE),$(wait_shared))

$(RUNS)/model/artifact.json: $(RUNS)/data2/artifact.json $(RUNS)/extended/artifact.json
	$(PRETRAIN) $(<D) --init-from $(RUNS)/extended --continue-schedule --steps $(DECAY) \
	    --batch-size $(BATCH2) $(TRAIN_ARGS) --out $(@D) --force
	$(if $(MULTINODE),$(wait_shared))

modern-clean:
	rm -rf $(RUNS)
