# Search, the whole recipe: the original model evaluated; fine-tuned on the pairs (in-batch
# negatives); hard negatives mined with the original (or the in-batch model: MINE_WITH) and a
# fine-tuning of the original on them (round 1); ROUNDS - 1 more rounds, each mining with the
# model the round before made and training it on its own rows (round-2 ...); a reranker
# (cross-encoder) trained on the mined rows and the search reranked by it; the last round's
# own candidates trained on twice: with no teacher (remined, one more round: the control) and
# with a TEACHER's scores distilled into it (the reranker's, listwise KL; or the last round's
# own late interaction over its token vectors, listwise KL plus in-batch negatives), so the
# report shows the teacher's own share as the gain of one over the other (a reranker under
# its first stage teaches less than the round alone: docs/benchmarks.md); the FINAL of the two
# evaluated with and without reranking (by the reranker, and by its own token vectors, also
# through a late-interaction head fitted to it: LATE_DIM), exported (int8) and evaluated
# again; one report whose first table is each step's gain in nDCG@10 with its standard error
# over the queries.
#
#   make -C pipelines search MODEL=DIR TRAIN=pairs.tsv BEIR=DIR [CORPUS=texts.txt]
#   make -C pipelines -f search.mk search MODEL=... TRAIN=... BEIR=...   (the same)
#
# Targets: search (the report RUNS/report, needs bertctl[report], and every eval),
# search-clean.
#
# Variables (paths relative to the directory make was started from, or absolute):
#   MODEL      the starting model: an embedding or sentence-transformers model, or any encoder;
#              the reranker starts from it too
#   TRAIN      the (query, positive) pairs
#   BEIR       the evaluation set: a BEIR directory (corpus.jsonl, queries.jsonl, qrels/)
#   CORPUS     more documents to mine negatives from (a .txt, a text a line, or a corpus.jsonl)
#   STEPS, EPOCHS, BATCH, LR, SEED   the bi-encoder's fine-tuning (1 epoch, 32, 2e-5, 0;
#              STEPS instead of EPOCHS when set)
#   RERANK_LR, RERANK_BATCH, RERANK_LENGTH   the reranker's (5e-5, 32 rows, 128 tokens)
#   RERANK_EPOCHS   the reranker's epochs (default: EPOCHS, or STEPS steps when set)
#   NEGATIVES, MINE_FLAGS   mining's (3; more guards, e.g. --relative-margin 0.05)
#   RERANK_NEGATIVES   negatives a row of the reranker's rows (default NEGATIVES: the mined
#              rows); another count mines rows of their own, by the same model with the same
#              guards. A reranker from a pretraining checkpoint wants more than the
#              bi-encoder's 3 (15, over 3 epochs: docs/benchmarks.md)
#   MINE_WITH  the model that mines: original, or inbatch (the original fine-tuned on TRAIN),
#              or auto (default): original for a MODEL trained for search (it has a sentence
#              embedding layout, modules.json), inbatch for any other (a pretraining checkpoint,
#              whose own negatives taught less than in-batch ones: docs/benchmarks.md)
#   ROUNDS     rounds of mining and training before the teacher's (at least 1), or auto
#              (default): 1 for a MODEL trained for search, 2 for any other (a pretraining
#              checkpoint gained at every seed from each round: docs/benchmarks.md)
#   TEACHER    what the distilled model learns from: reranker (the cross-encoder), late (the
#              last round's own MaxSim over its token vectors: eval --rerank-scoring maxsim),
#              or auto (default): reranker for a MODEL trained for search, late for any other
#              (whose cross-encoder stayed under its first stage and taught less than the
#              round alone, where its own token vectors taught more: docs/benchmarks.md)
#   FINAL      the model exported and reranked last: distilled, remined, or auto (default):
#              remined when a pretraining checkpoint's TEACHER is the reranker (it taught
#              less than the round without it), else distilled
#   LATE_DIM   the late-interaction head fitted to FINAL on the teacher's rows (finetune
#              --late-dim, the encoder frozen: its search unchanged) and FINAL's reordering
#              through it (late-head): a size, none, or auto (default): 128 (ColBERT's) for a
#              pretraining checkpoint (its reordering gained at every seed: docs/benchmarks.md),
#              none for a MODEL trained for search (it gained nothing there)
#   LATE_LR    the head's rate (3e-3, one epoch)
#   DEPTH      documents a query the reranker reorders (20)
#   LATE_DEPTH documents a query reordered by token vectors (FINAL's own, its head's): 30
#              (deeper than a cross-encoder's: the reordering is cheap, and through the
#              head depth 30 gained over 10 at every seed; docs/benchmarks.md)
#   FLAGS      more flags for every command (e.g. --precision fp32)
#   RUNS       where the artifacts go (default runs/search)
#   BERTCTL    the bertctl command (default: .venv's when `make setup` made it, else bertctl)

ROOT    := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BERTCTL ?= $(if $(wildcard $(ROOT)/.venv/bin/bertctl),$(ROOT)/.venv/bin/bertctl,bertctl)
RUNS    ?= $(ROOT)/runs/search
EPOCHS  ?= 1
STEPS   ?=
BATCH   ?= 32
LR      ?= 2e-5
SEED    ?= 0
RERANK_LR ?= 5e-5
RERANK_BATCH ?= 32
RERANK_LENGTH ?= 128
NEGATIVES ?= 3
RERANK_NEGATIVES ?= $(NEGATIVES)
RERANK_EPOCHS ?=
MINE_WITH ?= auto
ROUNDS  ?= auto
FINAL   ?= auto
TEACHER ?= auto
LATE_DIM ?= auto
LATE_LR ?= 3e-3
MINE_FLAGS ?=
DEPTH   ?= 20
LATE_DEPTH ?= 30
FLAGS   ?=
CORPUS  ?=

include $(ROOT)/pipelines/paths.mk
$(call resolve,MODEL TRAIN BEIR RUNS CORPUS)

ifeq ($(filter search-clean,$(MAKECMDGOALS)),)
ifeq ($(strip $(MODEL)),)
$(error MODEL= is required: the model to start from (e.g. a sentence-transformers directory))
endif
ifeq ($(strip $(TRAIN)),)
$(error TRAIN= is required: the (query, positive) pairs to train on)
endif
ifeq ($(strip $(BEIR)),)
$(error BEIR= is required: a BEIR directory (corpus.jsonl, queries.jsonl, qrels/) to evaluate on)
endif
$(call must_exist,MODEL TRAIN BEIR $(if $(strip $(CORPUS)),CORPUS))
ifeq ($(filter auto original inbatch,$(MINE_WITH)),)
$(error MINE_WITH=$(MINE_WITH): must be auto, original or inbatch)
endif
ifeq ($(filter auto,$(ROUNDS))$(shell echo '$(ROUNDS)' | grep -Ex '[1-9][0-9]?'),)
$(error ROUNDS=$(ROUNDS): must be auto or a whole number of rounds from 1 to 99)
endif
ifeq ($(filter auto distilled remined,$(FINAL)),)
$(error FINAL=$(FINAL): must be auto, distilled or remined)
endif
ifeq ($(filter auto reranker late,$(TEACHER)),)
$(error TEACHER=$(TEACHER): must be auto, reranker or late)
endif
ifeq ($(filter auto none,$(LATE_DIM))$(shell echo '$(LATE_DIM)' | grep -Ex '[1-9][0-9]{0,4}'),)
$(error LATE_DIM=$(LATE_DIM): must be auto, none or a size such as 128)
endif
endif

MODEL_DEPS := $(or $(wildcard $(MODEL)/artifact.json),\
                   $(wildcard $(MODEL)/config.json $(MODEL)/model.safetensors))
BEIR_DEPS  := $(wildcard $(BEIR)/*.jsonl $(BEIR)/qrels/*.tsv)
LENGTH     := $(if $(STEPS),--steps $(STEPS),--epochs $(EPOCHS))
TRAINING   := $(LENGTH) --batch-size $(BATCH) --lr $(LR) --seed $(SEED) $(FLAGS)
GUARDS     := $(if $(strip $(CORPUS)),--corpus $(CORPUS)) $(MINE_FLAGS) $(FLAGS)
MINING     := --negatives $(NEGATIVES) $(GUARDS)
EVAL       := --task retrieval $(FLAGS)
# A MODEL trained for search (modules.json, the file `bertctl mine` reads the layout from and
# warns without) or a pretraining checkpoint: what every auto below follows.
SEARCH_MODEL := $(wildcard $(MODEL)/modules.json)
MINE_AS    := $(if $(filter auto,$(MINE_WITH)),$(if $(SEARCH_MODEL),original,inbatch),$(MINE_WITH))
MINER      := $(if $(filter inbatch,$(MINE_AS)),$(RUNS)/inbatch,$(MODEL))
ROUNDS_RUN := $(if $(filter auto,$(ROUNDS)),$(if $(SEARCH_MODEL),1,2),$(ROUNDS))
TEACHER_RUN := $(if $(filter auto,$(TEACHER)),$(if $(SEARCH_MODEL),reranker,late),$(TEACHER))
TAUGHT_MORE := $(SEARCH_MODEL)$(filter late,$(TEACHER_RUN))
FINAL_RUN  := $(if $(filter auto,$(FINAL)),$(if $(TAUGHT_MORE),distilled,remined),$(FINAL))
LATE_HEAD  := $(filter-out none,$(if $(filter auto,$(LATE_DIM)),$(if $(SEARCH_MODEL),none,128),\
                                     $(LATE_DIM)))
# Round k's model and, as word k of BEFORE, the model round k starts from and mines with.
LATER_ROUNDS := $(wordlist 2,$(ROUNDS_RUN),$(shell seq 99))
ROUND_MODELS := mined-model $(foreach k,$(LATER_ROUNDS),round-$(k))
BEFORE     := - $(ROUND_MODELS)
LAST_ROUND := $(lastword $(ROUND_MODELS))
OTHER      := $(filter-out $(FINAL_RUN),distilled remined)
MINER_DEPS := $(if $(filter inbatch,$(MINE_AS)),$(RUNS)/inbatch/artifact.json,$(MODEL_DEPS))
# The reranker's rows: the mined ones, or rows of their own with another count of negatives.
RERANK_ROWS := $(RUNS)/$(if $(filter $(NEGATIVES),$(RERANK_NEGATIVES)),mined,rerank-rows)
RERANK_LENGTH_FLAG := $(if $(RERANK_EPOCHS),--epochs $(RERANK_EPOCHS),$(LENGTH))

.PHONY: search search-clean
search: $(RUNS)/report/artifact.json

# The steps, each an artifact with its lineage.
$(RUNS)/inbatch/artifact.json: $(MODEL_DEPS) $(TRAIN)
	$(BERTCTL) finetune $(MODEL) $(TRAIN) --task retrieval $(TRAINING) --out $(@D) --force
$(RUNS)/mined/artifact.json: $(MINER_DEPS) $(TRAIN) $(CORPUS)
	$(BERTCTL) mine $(MINER) $(TRAIN) $(MINING) --out $(@D) --force
$(RUNS)/mined-model/artifact.json: $(RUNS)/mined/artifact.json
	$(BERTCTL) finetune $(MODEL) $(<D)/pairs.jsonl --task retrieval $(TRAINING) --out $(@D) --force
$(RUNS)/rerank-rows/artifact.json: $(MINER_DEPS) $(TRAIN) $(CORPUS)
	$(BERTCTL) mine $(MINER) $(TRAIN) --negatives $(RERANK_NEGATIVES) $(GUARDS) --out $(@D) \
	    --force
$(RUNS)/reranker/artifact.json: $(RERANK_ROWS)/artifact.json
	$(BERTCTL) finetune $(MODEL) $(<D)/pairs.jsonl --task reranking $(RERANK_LENGTH_FLAG) \
	    --batch-size $(RERANK_BATCH) --lr $(RERANK_LR) --max-seq-length $(RERANK_LENGTH) \
	    --seed $(SEED) $(FLAGS) --out $(@D) --force
# Round k (2 ...): the model of round k - 1 mines with the same guards and trains on its rows.
define round
$(RUNS)/$(1)-rows/artifact.json: $(RUNS)/$(2)/artifact.json $(TRAIN) $(CORPUS)
	$(BERTCTL) mine $(RUNS)/$(2) $(TRAIN) $(MINING) --out $$(@D) --force
$(RUNS)/$(1)/artifact.json: $(RUNS)/$(1)-rows/artifact.json
	$(BERTCTL) finetune $(RUNS)/$(2) $$(<D)/pairs.jsonl --task retrieval $(TRAINING) \
	    --out $$(@D) --force
endef
$(foreach k,$(LATER_ROUNDS),$(eval $(call round,round-$(k),$(word $(k),$(BEFORE)))))
# The teacher's scores of the last round's own rows: the reranker's, or its own late
# interaction's (kl_infonce: its KL alone stayed under the control, with in-batch negatives
# it gained: docs/benchmarks.md).
LATE_TEACHER := $(filter late,$(TEACHER_RUN))
TEACHER_DIR := $(RUNS)/$(if $(LATE_TEACHER),$(LAST_ROUND),reranker)
DISTILL_LOSS := $(if $(LATE_TEACHER),--loss kl_infonce)
$(RUNS)/taught/artifact.json: $(RUNS)/$(LAST_ROUND)/artifact.json $(TEACHER_DIR)/artifact.json
	$(BERTCTL) mine $(RUNS)/$(LAST_ROUND) $(TRAIN) $(MINING) --teacher $(TEACHER_DIR) \
	    $(if $(LATE_TEACHER),--teacher-scoring maxsim) --out $(@D) --force
# The control: the same rows and training, the teacher's scores left unread.
$(RUNS)/remined/artifact.json: $(RUNS)/taught/artifact.json
	$(BERTCTL) finetune $(RUNS)/$(LAST_ROUND) $(<D)/pairs.jsonl --task retrieval \
	    --loss infonce $(TRAINING) --out $(@D) --force
$(RUNS)/distilled/artifact.json: $(RUNS)/taught/artifact.json
	$(BERTCTL) finetune $(RUNS)/$(LAST_ROUND) $(<D)/pairs.jsonl --task retrieval \
	    $(DISTILL_LOSS) $(TRAINING) --out $(@D) --force
# FINAL with a late-interaction head fitted on the rows it was trained on (its weights as
# they were: the search is FINAL's).
$(RUNS)/late-head/artifact.json: $(RUNS)/$(FINAL_RUN)/artifact.json $(RUNS)/taught/artifact.json
	$(BERTCTL) finetune $(RUNS)/$(FINAL_RUN) $(RUNS)/taught/pairs.jsonl --task retrieval \
	    --late-dim $(LATE_HEAD) --epochs 1 --batch-size $(BATCH) --lr $(LATE_LR) --seed $(SEED) \
	    $(FLAGS) --out $(@D) --force
$(RUNS)/export/artifact.json: $(RUNS)/$(FINAL_RUN)/artifact.json
	$(BERTCTL) export $(<D) --quantize int8 --out $(@D) --force

# The evals: the original, each model, the first round's and FINAL reranked too, and FINAL
# reordered by its own token vectors (late interaction).
$(RUNS)/eval-original/artifact.json: $(MODEL_DEPS) $(BEIR_DEPS)
	$(BERTCTL) eval $(MODEL) $(BEIR) $(EVAL) --out $(@D) --force
$(RUNS)/eval-%/artifact.json: $(RUNS)/%/artifact.json $(BEIR_DEPS)
	$(BERTCTL) eval $(<D) $(BEIR) $(EVAL) --out $(@D) --force
$(RUNS)/eval-%-reranked/artifact.json: $(RUNS)/%/artifact.json $(RUNS)/reranker/artifact.json \
        $(BEIR_DEPS)
	$(BERTCTL) eval $(<D) $(BEIR) $(EVAL) --rerank $(RUNS)/reranker --rerank-depth $(DEPTH) \
	    --out $(@D) --force
$(RUNS)/eval-%-late/artifact.json: $(RUNS)/%/artifact.json $(BEIR_DEPS)
	$(BERTCTL) eval $(<D) $(BEIR) $(EVAL) --rerank $(<D) --rerank-scoring maxsim \
	    --rerank-depth $(LATE_DEPTH) --out $(@D) --force

# In the report's order: a model's gain is over the model before (each round's over the
# round before; FINAL's over the other of remined and distilled: the teacher's share, or
# minus it), a reranked (or late) run's over its first stage.
STEPS_SHOWN := original inbatch mined-model-reranked $(wordlist 2,99,$(ROUND_MODELS)) $(OTHER) \
               $(FINAL_RUN)-reranked $(FINAL_RUN)-late $(if $(LATE_HEAD),late-head-late) export
EVALS := $(foreach e,$(STEPS_SHOWN),$(RUNS)/eval-$(e)/artifact.json)
$(RUNS)/report/artifact.json: $(EVALS)
	$(BERTCTL) report $(patsubst %/artifact.json,%,$(EVALS)) \
	    --title "search: each step of the recipe" --out $(@D) --force
	@echo "search: $(RUNS)/report/report.html"

search-clean:
	rm -rf $(RUNS)
