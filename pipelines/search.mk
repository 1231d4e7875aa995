# Search, the whole recipe, every automatic choice measured on a dev set of the user's own
# data: a share of TRAIN's queries held out by query (bertctl split; or DEV=, a BEIR directory
# of the user's, refused if it shares a query with TRAIN). The test set (BEIR) is read by the
# evals the report shows, never by a choice.
#
# The steps: the original model evaluated; fine-tuned on the pairs (in-batch negatives); hard
# negatives mined with the original (or the in-batch model: MINE_WITH) and a fine-tuning of
# the original on them (round 1); more rounds, each mining with the model the round before
# made and training it on its own rows (round-2 ...), the last one kept the last that gained
# on dev (ROUNDS=auto); a reranker (cross-encoder) trained on the mined rows, its best epoch
# by dev; the teacher chosen on dev: the reranker's or the last round's own late interaction
# (its MaxSim over its token vectors), whichever reorders the last round's dev search best,
# or none when neither gains; the last round's own candidates trained on twice, with no
# teacher (remined: the control) and with the teacher's scores distilled into it (with none,
# distilled is the control itself); FINAL chosen on dev among the original, the in-batch
# model, the last round, remined and distilled (the original unless one gains: the pipeline
# ships nothing worse on dev than the model it was given); a late-interaction head fitted to
# FINAL (LATE_DIM); the second stage chosen on dev (none, the reranker at each of
# RERANK_DEPTHS, FINAL's own token vectors, its head); FINAL exported (int8). One report: its
# first table each step's gain in nDCG@10 on the test queries with its standard error, its
# second the choices with the dev figures that made them.
#
#   make -C pipelines search MODEL=DIR TRAIN=pairs.tsv BEIR=DIR [CORPUS=texts.txt] [DEV=DIR]
#   make -C pipelines -f search.mk search MODEL=... TRAIN=... BEIR=...   (the same)
#
# Targets: search (the report RUNS/report, needs bertctl[report], and every eval),
# search-clean.
#
# Variables (paths relative to the directory make was started from, or absolute):
#   MODEL      the starting model: an embedding or sentence-transformers model, or any encoder;
#              the reranker starts from it too
#   TRAIN      the (query, positive) pairs
#   BEIR       the test set: a BEIR directory (corpus.jsonl, queries.jsonl, qrels/)
#   CORPUS     more documents to mine negatives from (a .txt, a text a line, or a corpus.jsonl);
#              the held-out dev set searches them too
#   DEV        a dev set of the user's (a BEIR directory, or one qrels file of one); unset:
#              DEV_SHARE (0.1) of TRAIN's queries held out, at least DEV_MIN (50: a paired
#              nDCG@10 difference to about 0.03), and a TRAIN of fewer than 2 x DEV_MIN queries
#              is refused (give DEV=)
#   STEPS, EPOCHS, BATCH, LR, SEED   the bi-encoder's fine-tuning (1 epoch, 32, 2e-5, 0;
#              STEPS instead of EPOCHS when set); each fine-tuning keeps its best evaluated
#              weights by dev (finetune --dev: the dev rows below)
#   RERANK_LR, RERANK_BATCH, RERANK_LENGTH   the reranker's (5e-5, 32 rows, 128 tokens)
#   RERANK_EPOCHS, RERANK_PATIENCE   the reranker trains until its dev rows' nDCG@10 has not
#              improved for RERANK_PATIENCE (2) epochs, at most RERANK_EPOCHS (10), its best
#              epoch kept
#   DEV_NEGATIVES   negatives a dev row (9): the dev queries' rows mined by the miner over
#              the dev corpus, what each fine-tuning's --dev reads
#   NEGATIVES, MINE_FLAGS   mining's (3; more guards, e.g. --relative-margin 0.05)
#   RERANK_NEGATIVES   negatives a row of the reranker's rows (default NEGATIVES: the mined
#              rows); another count mines rows of their own, by the same model with the same
#              guards. A reranker from a pretraining checkpoint wants more than the
#              bi-encoder's 3 (15, over 3 epochs: docs/benchmarks.md)
#   MINE_WITH  the model that mines: original, or inbatch (the original fine-tuned on TRAIN),
#              or auto (default): original for a MODEL trained for search (it has a sentence
#              embedding layout, modules.json), inbatch for any other (a pretraining checkpoint,
#              whose own negatives taught less than in-batch ones: docs/benchmarks.md)
#   ROUNDS     rounds of mining and training (at least 1), or auto (default): up to
#              MAX_ROUNDS (2), the last kept the last one that gained on dev over the one before
#   TEACHER    reranker, late or auto (default: chosen on dev, none when neither gains)
#   FINAL      the model exported and reranked last: distilled, remined, or auto (default:
#              chosen on dev)
#   LATE_DIM   the late-interaction head fitted to FINAL on the teacher's rows (finetune
#              --late-dim, the encoder frozen: its search unchanged) and FINAL's reordering
#              through it (late-head): a size, none, or auto (default: 128, ColBERT's; a
#              candidate of the second stage's choice)
#   LATE_LR    the head's rate (3e-3, one epoch)
#   DEPTH      documents a query the reranker reorders on the test set when the dev choice
#              takes no depth of its own (20); RERANK_DEPTHS the depths the dev choice tries
#              (10 20 50)
#   LATE_DEPTH documents a query reordered by token vectors (FINAL's own, its head's): 30
#              (deeper than a cross-encoder's: the reordering is cheap, and through the
#              head depth 30 gained over 10 at every seed; docs/benchmarks.md)
#   MIN_GAIN   the dev gain a choice needs (0: any gain; a tie keeps what was before)
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
RERANK_EPOCHS ?= 10
RERANK_PATIENCE ?= 2
NEGATIVES ?= 3
RERANK_NEGATIVES ?= $(NEGATIVES)
DEV_NEGATIVES ?= 9
DEV_SHARE ?= 0.1
DEV_MIN ?= 50
MINE_WITH ?= auto
ROUNDS  ?= auto
MAX_ROUNDS ?= 2
FINAL   ?= auto
TEACHER ?= auto
LATE_DIM ?= auto
LATE_LR ?= 3e-3
MINE_FLAGS ?=
DEPTH   ?= 20
RERANK_DEPTHS ?= 10 20 50
LATE_DEPTH ?= 30
MIN_GAIN ?= 0
FLAGS   ?=
CORPUS  ?=
DEV     ?=

include $(ROOT)/pipelines/paths.mk
$(call resolve,MODEL TRAIN BEIR RUNS CORPUS DEV)

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
$(call must_exist,MODEL TRAIN BEIR $(if $(strip $(CORPUS)),CORPUS) $(if $(strip $(DEV)),DEV))
ifeq ($(filter auto original inbatch,$(MINE_WITH)),)
$(error MINE_WITH=$(MINE_WITH): must be auto, original or inbatch)
endif
ifeq ($(filter auto,$(ROUNDS))$(shell echo '$(ROUNDS)' | grep -Ex '[1-9][0-9]?'),)
$(error ROUNDS=$(ROUNDS): must be auto or a whole number of rounds from 1 to 99)
endif
ifeq ($(shell echo '$(MAX_ROUNDS)' | grep -Ex '[1-9][0-9]?'),)
$(error MAX_ROUNDS=$(MAX_ROUNDS): must be a whole number of rounds from 1 to 99)
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
ifneq ($(strip $(foreach d,$(RERANK_DEPTHS),$(if $(shell echo '$(d)' | grep -Ex '[1-9][0-9]{0,3}'),,$(d)))),)
$(error RERANK_DEPTHS=$(RERANK_DEPTHS): must be depths such as 10 20 50)
endif
endif

MODEL_DEPS := $(or $(wildcard $(MODEL)/artifact.json),\
                   $(wildcard $(MODEL)/config.json $(MODEL)/model.safetensors))
BEIR_DEPS  := $(wildcard $(BEIR)/*.jsonl $(BEIR)/qrels/*.tsv)
DEV_DEPS   := $(if $(DEV),$(wildcard $(DEV) $(DEV)/*.jsonl $(DEV)/qrels/*.tsv))
# The rows trained on and the dev set (bertctl split): every step below reads these.
SPLIT      := $(RUNS)/split
PAIRS      := $(SPLIT)/train.jsonl
DEVSET     := $(SPLIT)/dev
DEV_ROWS   := $(RUNS)/dev-rows/pairs.jsonl
LENGTH     := $(if $(STEPS),--steps $(STEPS),--epochs $(EPOCHS))
TRAINING   := $(LENGTH) --batch-size $(BATCH) --lr $(LR) --seed $(SEED) $(FLAGS)
SELECTED   := --dev $(DEV_ROWS)
GUARDS     := $(if $(strip $(CORPUS)),--corpus $(CORPUS)) $(MINE_FLAGS) $(FLAGS)
MINING     := --negatives $(NEGATIVES) $(GUARDS)
EVAL       := --task retrieval $(FLAGS)
CHOOSE     := --min-gain $(MIN_GAIN)
# A MODEL trained for search (modules.json, the file `bertctl mine` reads the layout from and
# warns without) or a pretraining checkpoint: what MINE_WITH=auto follows.
SEARCH_MODEL := $(wildcard $(MODEL)/modules.json)
MINE_AS    := $(if $(filter auto,$(MINE_WITH)),$(if $(SEARCH_MODEL),original,inbatch),$(MINE_WITH))
MINER      := $(if $(filter inbatch,$(MINE_AS)),$(RUNS)/inbatch,$(MODEL))
MINER_DEPS := $(if $(filter inbatch,$(MINE_AS)),$(RUNS)/inbatch/artifact.json,$(MODEL_DEPS))
ROUNDS_RUN := $(if $(filter auto,$(ROUNDS)),$(MAX_ROUNDS),$(ROUNDS))
LATE_HEAD  := $(filter-out none,$(if $(filter auto,$(LATE_DIM)),128,$(LATE_DIM)))
# Round k's model and, as word k of BEFORE, the model round k starts from and mines with.
LATER_ROUNDS := $(wordlist 2,$(ROUNDS_RUN),$(shell seq 99))
ROUND_MODELS := mined-model $(foreach k,$(LATER_ROUNDS),round-$(k))
BEFORE     := - $(ROUND_MODELS)
# The reranker's rows: the mined ones, or rows of their own with another count of negatives.
RERANK_ROWS := $(RUNS)/$(if $(filter $(NEGATIVES),$(RERANK_NEGATIVES)),mined,rerank-rows)

# What a choice made on dev gives, read when a recipe runs (a choice artifact's model.txt and
# chosen.txt); the choice itself is a step the recipes depend on. Given a fixed value, no
# choice is made.
read_choice = $$(cat $(RUNS)/choose-$(1)/$(2))
CHOSE_ROUNDS := $(and $(filter auto,$(ROUNDS)),$(LATER_ROUNDS))
LAST       := $(if $(CHOSE_ROUNDS),$(call read_choice,rounds,model.txt),$(RUNS)/$(lastword $(ROUND_MODELS)))
LAST_DEP   := $(if $(CHOSE_ROUNDS),$(RUNS)/choose-rounds,$(RUNS)/$(lastword $(ROUND_MODELS)))/artifact.json
TEACHER_RUN := $(if $(filter auto,$(TEACHER)),$(call read_choice,teacher,chosen.txt),$(TEACHER))
TEACHER_DEP := $(if $(filter auto,$(TEACHER)),$(RUNS)/choose-teacher/artifact.json,\
                 $(if $(filter reranker,$(TEACHER)),$(RUNS)/reranker/artifact.json))
FINAL_DIR  := $(if $(filter auto,$(FINAL)),$(call read_choice,final,model.txt),$(RUNS)/$(FINAL))
FINAL_DEP  := $(if $(filter auto,$(FINAL)),$(RUNS)/choose-final,$(RUNS)/$(FINAL))/artifact.json

.PHONY: search search-clean
search: $(RUNS)/report/artifact.json

# The dev set: held out of TRAIN, or the user's, checked against it.
$(SPLIT)/artifact.json: $(TRAIN) $(CORPUS) $(DEV_DEPS)
	$(BERTCTL) split $(TRAIN) $(if $(DEV),--dev $(DEV),--dev-share $(DEV_SHARE) \
	    $(if $(strip $(CORPUS)),--corpus $(CORPUS))) --min-dev-queries $(DEV_MIN) \
	    --seed $(SEED) --out $(@D) --force
# The dev queries' rows, their negatives mined over the dev corpus: each fine-tuning's --dev.
$(RUNS)/dev-rows/artifact.json: $(MINER_DEPS) $(SPLIT)/artifact.json
	$(BERTCTL) mine $(MINER) $(SPLIT)/dev-pairs.jsonl --negatives $(DEV_NEGATIVES) \
	    --corpus $(DEVSET)/corpus.jsonl $(MINE_FLAGS) $(FLAGS) --out $(@D) --force

# The steps, each an artifact with its lineage.
$(RUNS)/inbatch/artifact.json: $(MODEL_DEPS) $(SPLIT)/artifact.json
	$(BERTCTL) finetune $(MODEL) $(PAIRS) --task retrieval $(TRAINING) --out $(@D) --force
$(RUNS)/mined/artifact.json: $(MINER_DEPS) $(SPLIT)/artifact.json $(CORPUS)
	$(BERTCTL) mine $(MINER) $(PAIRS) $(MINING) --out $(@D) --force
$(RUNS)/mined-model/artifact.json: $(RUNS)/mined/artifact.json $(RUNS)/dev-rows/artifact.json
	$(BERTCTL) finetune $(MODEL) $(<D)/pairs.jsonl --task retrieval $(TRAINING) $(SELECTED) \
	    --out $(@D) --force
$(RUNS)/rerank-rows/artifact.json: $(MINER_DEPS) $(SPLIT)/artifact.json $(CORPUS)
	$(BERTCTL) mine $(MINER) $(PAIRS) --negatives $(RERANK_NEGATIVES) $(GUARDS) --out $(@D) \
	    --force
$(RUNS)/reranker/artifact.json: $(RERANK_ROWS)/artifact.json $(RUNS)/dev-rows/artifact.json
	$(BERTCTL) finetune $(MODEL) $(<D)/pairs.jsonl --task reranking --epochs $(RERANK_EPOCHS) \
	    --patience $(RERANK_PATIENCE) --batch-size $(RERANK_BATCH) --lr $(RERANK_LR) \
	    --max-seq-length $(RERANK_LENGTH) \
	    --seed $(SEED) $(SELECTED) $(FLAGS) --out $(@D) --force
# Round k (2 ...): the model of round k - 1 mines with the same guards and trains on its rows.
define round
$(RUNS)/$(1)-rows/artifact.json: $(RUNS)/$(2)/artifact.json $(SPLIT)/artifact.json $(CORPUS)
	$(BERTCTL) mine $(RUNS)/$(2) $(PAIRS) $(MINING) --out $$(@D) --force
$(RUNS)/$(1)/artifact.json: $(RUNS)/$(1)-rows/artifact.json $(RUNS)/dev-rows/artifact.json
	$(BERTCTL) finetune $(RUNS)/$(2) $$(<D)/pairs.jsonl --task retrieval $(TRAINING) \
	    $(SELECTED) --out $$(@D) --force
endef
$(foreach k,$(LATER_ROUNDS),$(eval $(call round,round-$(k),$(word $(k),$(BEFORE)))))

# The choices, each on the dev set. Rounds: each taken while it gains over the one before.
$(RUNS)/choose-rounds/artifact.json: $(foreach m,$(ROUND_MODELS),$(RUNS)/dev-$(m)/artifact.json)
	$(BERTCTL) choose $(foreach m,$(ROUND_MODELS),$(m)=$(RUNS)/dev-$(m)) --rule chain \
	    $(CHOOSE) --out $(@D) --force
# The teacher: whichever reordering of the last round's dev search gains most, or none.
$(RUNS)/choose-teacher/artifact.json: $(RUNS)/dev-last-reranked/artifact.json \
        $(RUNS)/dev-last-late/artifact.json
	$(BERTCTL) choose none=$(RUNS)/dev-last-reranked reranker=$(RUNS)/dev-last-reranked:rerank \
	    late=$(RUNS)/dev-last-late:rerank $(CHOOSE) --out $(@D) --force
# FINAL: the original unless a model gains over it.
FINALISTS  := original inbatch last remined distilled
$(RUNS)/choose-final/artifact.json: $(foreach m,$(FINALISTS),$(RUNS)/dev-$(m)/artifact.json)
	$(BERTCTL) choose $(foreach m,$(FINALISTS),$(m)=$(RUNS)/dev-$(m)) $(CHOOSE) --out $(@D) \
	    --force
# The second stage: none, the reranker at each depth, FINAL's own token vectors, its head.
SECOND     := $(foreach d,$(RERANK_DEPTHS),reranked-$(d)) late $(if $(LATE_HEAD),head)
$(RUNS)/choose-search/artifact.json: $(foreach m,$(SECOND),$(RUNS)/dev-final-$(m)/artifact.json)
	$(BERTCTL) choose none=$(RUNS)/dev-final-late $(foreach m,$(SECOND),$(m)=$(RUNS)/dev-final-$(m):rerank) \
	    $(CHOOSE) --out $(@D) --force

# The teacher's scores of the last round's own rows: the reranker's, or its own late
# interaction's (kl_infonce: its KL alone stayed under the control, with in-batch negatives
# it gained: docs/benchmarks.md); with no teacher, the rows alone.
$(RUNS)/taught/artifact.json: $(LAST_DEP) $(TEACHER_DEP) $(RUNS)/reranker/artifact.json
	t=$(TEACHER_RUN); $(BERTCTL) mine $(LAST) $(PAIRS) $(MINING) \
	    $$(case $$t in reranker) echo --teacher $(RUNS)/reranker;; \
	    late) echo --teacher $(LAST) --teacher-scoring maxsim;; esac) --out $(@D) --force
# The control: the same rows and training, the teacher's scores left unread.
$(RUNS)/remined/artifact.json: $(RUNS)/taught/artifact.json
	$(BERTCTL) finetune $(LAST) $(<D)/pairs.jsonl --task retrieval --loss infonce $(TRAINING) \
	    $(SELECTED) --out $(@D) --force
# Distilled from the teacher; with none, the control is the same training: its copy.
$(RUNS)/distilled/artifact.json: $(RUNS)/taught/artifact.json $(RUNS)/remined/artifact.json
	t=$(TEACHER_RUN); if [ "$$t" = none ]; then rm -rf $(@D) && cp -R $(RUNS)/remined $(@D); \
	else $(BERTCTL) finetune $(LAST) $(<D)/pairs.jsonl --task retrieval \
	    $$([ "$$t" = late ] && echo --loss kl_infonce) $(TRAINING) $(SELECTED) --out $(@D) \
	    --force; fi
# FINAL with a late-interaction head fitted on the rows it was trained on (its weights as
# they were: the search is FINAL's).
$(RUNS)/late-head/artifact.json: $(FINAL_DEP) $(RUNS)/taught/artifact.json
	$(BERTCTL) finetune $(FINAL_DIR) $(RUNS)/taught/pairs.jsonl --task retrieval \
	    --late-dim $(LATE_HEAD) --epochs 1 --batch-size $(BATCH) --lr $(LATE_LR) --seed $(SEED) \
	    $(FLAGS) --out $(@D) --force
$(RUNS)/export/artifact.json: $(FINAL_DEP)
	$(BERTCTL) export $(FINAL_DIR) --quantize int8 --out $(@D) --force

# The dev evals the choices read: each model's, the last round reordered by the reranker and
# by its own token vectors, FINAL reordered each way.
$(RUNS)/dev-original/artifact.json: $(MODEL_DEPS) $(SPLIT)/artifact.json
	$(BERTCTL) eval $(MODEL) $(DEVSET) $(EVAL) --out $(@D) --force
$(RUNS)/dev-last/artifact.json: $(LAST_DEP) $(SPLIT)/artifact.json
	$(BERTCTL) eval $(LAST) $(DEVSET) $(EVAL) --out $(@D) --force
$(RUNS)/dev-%/artifact.json: $(RUNS)/%/artifact.json $(SPLIT)/artifact.json
	$(BERTCTL) eval $(<D) $(DEVSET) $(EVAL) --out $(@D) --force
$(RUNS)/dev-last-reranked/artifact.json: $(LAST_DEP) $(RUNS)/reranker/artifact.json \
        $(SPLIT)/artifact.json
	$(BERTCTL) eval $(LAST) $(DEVSET) $(EVAL) --rerank $(RUNS)/reranker --rerank-depth $(DEPTH) \
	    --out $(@D) --force
$(RUNS)/dev-last-late/artifact.json: $(LAST_DEP) $(SPLIT)/artifact.json
	$(BERTCTL) eval $(LAST) $(DEVSET) $(EVAL) --rerank $(LAST) --rerank-scoring maxsim \
	    --rerank-depth $(LATE_DEPTH) --out $(@D) --force
$(RUNS)/dev-final-reranked-%/artifact.json: $(FINAL_DEP) $(RUNS)/reranker/artifact.json \
        $(SPLIT)/artifact.json
	$(BERTCTL) eval $(FINAL_DIR) $(DEVSET) $(EVAL) --rerank $(RUNS)/reranker --rerank-depth $* \
	    --out $(@D) --force
$(RUNS)/dev-final-late/artifact.json: $(FINAL_DEP) $(SPLIT)/artifact.json
	$(BERTCTL) eval $(FINAL_DIR) $(DEVSET) $(EVAL) --rerank $(FINAL_DIR) --rerank-scoring maxsim \
	    --rerank-depth $(LATE_DEPTH) --out $(@D) --force
$(RUNS)/dev-final-head/artifact.json: $(RUNS)/late-head/artifact.json $(SPLIT)/artifact.json
	$(BERTCTL) eval $(<D) $(DEVSET) $(EVAL) --rerank $(<D) --rerank-scoring maxsim \
	    --rerank-depth $(LATE_DEPTH) --out $(@D) --force

# The test evals the report shows: the original, each model, the first round's reranked too,
# and FINAL with the second stage the dev set chose (the reranker at its depth, else DEPTH),
# reordered by its own token vectors and through its head.
$(RUNS)/eval-original/artifact.json: $(MODEL_DEPS) $(BEIR_DEPS)
	$(BERTCTL) eval $(MODEL) $(BEIR) $(EVAL) --out $(@D) --force
$(RUNS)/eval-%/artifact.json: $(RUNS)/%/artifact.json $(BEIR_DEPS)
	$(BERTCTL) eval $(<D) $(BEIR) $(EVAL) --out $(@D) --force
$(RUNS)/eval-mined-model-reranked/artifact.json: $(RUNS)/mined-model/artifact.json \
        $(RUNS)/reranker/artifact.json $(BEIR_DEPS)
	$(BERTCTL) eval $(<D) $(BEIR) $(EVAL) --rerank $(RUNS)/reranker --rerank-depth $(DEPTH) \
	    --out $(@D) --force
$(RUNS)/eval-final-reranked/artifact.json: $(FINAL_DEP) $(RUNS)/choose-search/artifact.json \
        $(RUNS)/reranker/artifact.json $(BEIR_DEPS)
	d=$$(sed -n 's/^reranked-//p' $(RUNS)/choose-search/chosen.txt); \
	$(BERTCTL) eval $(FINAL_DIR) $(BEIR) $(EVAL) --rerank $(RUNS)/reranker \
	    --rerank-depth $${d:-$(DEPTH)} --out $(@D) --force
$(RUNS)/eval-final-late/artifact.json: $(FINAL_DEP) $(BEIR_DEPS)
	$(BERTCTL) eval $(FINAL_DIR) $(BEIR) $(EVAL) --rerank $(FINAL_DIR) --rerank-scoring maxsim \
	    --rerank-depth $(LATE_DEPTH) --out $(@D) --force
$(RUNS)/eval-late-head-late/artifact.json: $(RUNS)/late-head/artifact.json $(BEIR_DEPS)
	$(BERTCTL) eval $(<D) $(BEIR) $(EVAL) --rerank $(<D) --rerank-scoring maxsim \
	    --rerank-depth $(LATE_DEPTH) --out $(@D) --force

# In the report's order: a model's gain is over the model before (each round's over the
# round before; distilled's over remined: the teacher's share), a reranked (or late) run's
# over its first stage; then the choices.
STEPS_SHOWN := original inbatch mined-model-reranked $(wordlist 2,99,$(ROUND_MODELS)) remined \
               distilled final-reranked final-late $(if $(LATE_HEAD),late-head-late) export
CHOICES    := $(if $(CHOSE_ROUNDS),rounds) $(if $(filter auto,$(TEACHER)),teacher) \
              $(if $(filter auto,$(FINAL)),final) search
EVALS := $(foreach e,$(STEPS_SHOWN),$(RUNS)/eval-$(e)/artifact.json) \
         $(foreach c,$(CHOICES),$(RUNS)/choose-$(c)/artifact.json)
$(RUNS)/report/artifact.json: $(EVALS)
	$(BERTCTL) report $(patsubst %/artifact.json,%,$(EVALS)) \
	    --title "search: each step of the recipe" --out $(@D) --force
	@echo "search: $(RUNS)/report/report.html"

search-clean:
	rm -rf $(RUNS)
