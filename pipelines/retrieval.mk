# A search model (the retrieval family): fine-tune MODEL= on (query, positive) pairs, evaluate
# it and the model it started from on a BEIR directory, export the fine-tuned model to ONNX
# (int8 by default) and evaluate the export the same way, then one report of the three.
#
#   make -C pipelines retrieval MODEL=DIR TRAIN=examples/retrieval/train.tsv \
#       BEIR=examples/retrieval/beir
#   make -C pipelines -f retrieval.mk retrieval MODEL=... TRAIN=... BEIR=...   (the same)
#
# Targets: retrieval (the report RUNS/report, needs bertctl[report], and the evals),
# retrieval-model (the fine-tuned model only), retrieval-clean.
#
# Variables (paths relative to the directory make was started from, or absolute):
#   MODEL      the model fine-tuned: an embedding or sentence-transformers model, or any encoder
#   TRAIN      the pairs: a table with query and positive columns (more: hard negatives), a
#              .txt of texts (SimCSE), or scored pairs with TASK=glue/sts-b-cosine
#   BEIR       the evaluation set: a BEIR directory (corpus.jsonl, queries.jsonl, qrels/) or
#              one of its qrels files
#   TASK       the task preset (default retrieval)
#   STEPS, EPOCHS, BATCH, LR, SEED   fine-tuning's (defaults: 1 epoch, 32, 2e-5, 0; STEPS
#              instead of EPOCHS when set)
#   QUANTIZE   the export's (default int8; fp32 to keep float weights)
#   FINETUNE_FLAGS, EVAL_FLAGS   more flags (e.g. --cache-negatives 32, --precision fp32)
#   RUNS       where the artifacts go (default runs/retrieval)
#   BERTCTL    the bertctl command (default: .venv's when `make setup` made it, else bertctl)

ROOT    := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BERTCTL ?= $(if $(wildcard $(ROOT)/.venv/bin/bertctl),$(ROOT)/.venv/bin/bertctl,bertctl)
RUNS    ?= $(ROOT)/runs/retrieval
TASK    ?= retrieval
EPOCHS  ?= 1
STEPS   ?=
BATCH   ?= 32
LR      ?= 2e-5
SEED    ?= 0
QUANTIZE ?= int8
FINETUNE_FLAGS ?=
EVAL_FLAGS ?=

include $(ROOT)/pipelines/paths.mk
$(call resolve,MODEL TRAIN BEIR RUNS)

ifeq ($(filter retrieval-clean,$(MAKECMDGOALS)),)
ifeq ($(strip $(MODEL)),)
$(error MODEL= is required: the model to fine-tune (e.g. a sentence-transformers directory))
endif
ifeq ($(strip $(TRAIN)),)
$(error TRAIN= is required: the (query, positive) pairs to fine-tune on)
endif
ifeq ($(strip $(BEIR)),)
$(error BEIR= is required: a BEIR directory (corpus.jsonl, queries.jsonl, qrels/) to evaluate on)
endif
$(call must_exist,MODEL TRAIN BEIR)
endif

MODEL_DEPS := $(or $(wildcard $(MODEL)/artifact.json),\
                   $(wildcard $(MODEL)/config.json $(MODEL)/model.safetensors))
BEIR_DEPS  := $(if $(wildcard $(BEIR)/corpus.jsonl),\
                   $(wildcard $(BEIR)/*.jsonl $(BEIR)/qrels/*.tsv),$(BEIR))

.PHONY: retrieval retrieval-model retrieval-clean
retrieval: $(RUNS)/report/artifact.json
retrieval-model: $(RUNS)/model/artifact.json

$(RUNS)/model/artifact.json: $(MODEL_DEPS) $(TRAIN)
	$(BERTCTL) finetune $(MODEL) $(TRAIN) --task $(TASK) \
	    $(if $(STEPS),--steps $(STEPS),--epochs $(EPOCHS)) --batch-size $(BATCH) --lr $(LR) \
	    --seed $(SEED) $(FINETUNE_FLAGS) --out $(@D) --force

$(RUNS)/export/artifact.json: $(RUNS)/model/artifact.json
	$(BERTCTL) export $(<D) --quantize $(QUANTIZE) --out $(@D) --force

# eval: the name, the model's artifact.json (or files) and directory
define EVAL
$(RUNS)/eval-$(1)/artifact.json: $(2) $(BEIR_DEPS)
	$(BERTCTL) eval $(3) $(BEIR) --task $(TASK) $(EVAL_FLAGS) --out $$(@D) --force
endef
$(eval $(call EVAL,original,$(MODEL_DEPS),$(MODEL)))
$(eval $(call EVAL,model,$(RUNS)/model/artifact.json,$(RUNS)/model))
$(eval $(call EVAL,export,$(RUNS)/export/artifact.json,$(RUNS)/export))

EVALS := $(foreach e,original model export,$(RUNS)/eval-$(e)/artifact.json)
$(RUNS)/report/artifact.json: $(EVALS)
	$(BERTCTL) report $(patsubst %/artifact.json,%,$(EVALS)) \
	    --title "retrieval: the original, fine-tuned and exported models" --out $(@D) --force
	@echo "retrieval: $(RUNS)/report/report.html"

retrieval-clean:
	rm -rf $(RUNS)
