# The paper's GLUE experiments (BERT, section 4.1): every GLUE task under GLUE= fine-tuned from
# MODEL= at each learning rate of LRS with each seed of SEEDS, each run evaluated on its dev and
# test files, then one summary: per task the dev metric's mean +- sd over seeds at each learning
# rate, the dev-selected run, and the benchmark's submission zip of that run's test predictions.
#
#   make -C pipelines glue GLUE=~/data/glue MODEL=runs/pretrain/phase2
#   make -C pipelines -f glue.mk glue GLUE=... MODEL=...     (the same, without the top Makefile)
#
# Every run is its own artifact directory, RUNS/TASK/lrLR-seedSEED/{model,dev,test,...}; a
# target is the artifact.json of what it makes, so make reruns only what is out of date and a
# second `make` does nothing. Targets:
#   glue          the summary artifact RUNS/summary (summary.md, summary.json, submission.zip)
#   glue-runs     every run's model and evals, without the summary
#   glue-report   one `bertctl report` page per task over its dev evals (needs bertctl[report])
#   glue-clean    remove RUNS
#
# Variables (paths relative to the directory make was started from, or absolute):
#   GLUE        the GLUE data directory as the download script lays it out: CoLA/ SST-2/ MRPC/
#               STS-B/ QQP/ MNLI/ QNLI/ RTE/ WNLI/ (train, dev and test TSVs; MNLI's dev_matched,
#               dev_mismatched, test_matched, test_mismatched) and diagnostic/diagnostic.tsv
#   MODEL       the model fine-tuned: a bertctl model artifact or a Hugging Face BERT directory
#   TASKS       the tasks run (default: every one of the nine whose train.tsv is under GLUE)
#   SEEDS       fine-tuning seeds (default 1 2 3 4 5)
#   LRS         learning rates, the paper's search (default 5e-5 3e-5 2e-5)
#   SEEDS_<TASK>, LRS_<TASK>   the same for one task (e.g. SEEDS_RTE="1 2 3 4 5 6 7 8 9 10":
#               more restarts where fine-tuning is unstable, as the paper did on small sets)
#   EPOCHS      passes over the training data (default 3)
#   BATCH       batch size (default 32)
#   MAX_SEQ     tokens per example (default 128)
#   KEEP        last (default, the paper: the weights after the last epoch) or best (the best
#               dev epoch, which makes the dev figures optimistic)
#   PRECISION   passed to finetune and eval when set (default: the CLI's); EVAL_PRECISION
#               overrides it for eval
#   AX          the diagnostic set, predicted with each MNLI model when the file exists
#               (default GLUE/diagnostic/diagnostic.tsv)
#   FINETUNE_FLAGS, EVAL_FLAGS   more flags for every finetune / eval
#   RUNS        where the artifacts go (default runs/glue)
#   BERTCTL     the bertctl command (default: .venv's when `make setup` made it, else bertctl)

ROOT    := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BERTCTL ?= $(if $(wildcard $(ROOT)/.venv/bin/bertctl),$(ROOT)/.venv/bin/bertctl,bertctl)
RUNS    ?= $(ROOT)/runs/glue
SEEDS   ?= 1 2 3 4 5
LRS     ?= 5e-5 3e-5 2e-5
EPOCHS  ?= 3
BATCH   ?= 32
MAX_SEQ ?= 128
KEEP    ?= last
PRECISION ?=
EVAL_PRECISION ?= $(PRECISION)
AX      ?= $(GLUE)/diagnostic/diagnostic.tsv
FINETUNE_FLAGS ?=
EVAL_FLAGS ?=

# The nine tasks: their presets, dev files (the first selects the run) and test files.
ALL_TASKS := CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE WNLI
PRESET_CoLA := glue/cola
PRESET_SST-2 := glue/sst2
PRESET_MRPC := glue/mrpc
PRESET_STS-B := glue/sts-b
PRESET_QQP := glue/qqp
PRESET_MNLI := glue/mnli
PRESET_QNLI := glue/qnli
PRESET_RTE := glue/rte
PRESET_WNLI := glue/wnli
$(foreach t,$(ALL_TASKS),$(eval DEV_$(t) := dev)$(eval TEST_$(t) := test))
DEV_MNLI  := dev_matched dev_mismatched
TEST_MNLI := test_matched test_mismatched
# CoLA's train and dev files have no header, its test file has one (index, sentence).
EVAL_FLAGS_CoLA_test := --header --text-column sentence

include $(ROOT)/pipelines/paths.mk
$(call resolve,GLUE MODEL RUNS)
$(call resolve,AX)
TASKS ?= $(foreach t,$(ALL_TASKS),$(if $(wildcard $(GLUE)/$(t)/train.tsv),$(t)))

ifeq ($(filter glue-clean,$(MAKECMDGOALS)),)
ifeq ($(strip $(GLUE)),)
$(error GLUE= is required: the GLUE data directory (CoLA/, SST-2/, ..., MNLI/))
endif
ifeq ($(strip $(MODEL)),)
$(error MODEL= is required: the model artifact or Hugging Face directory to fine-tune)
endif
$(call must_exist,GLUE MODEL)
ifeq ($(strip $(TASKS)),)
$(error no GLUE task under $(GLUE): none of $(ALL_TASKS) has a train.tsv there)
endif
endif

# A model artifact is up to date with its artifact.json; a plain Hugging Face directory with
# its config and weights.
MODEL_DEPS := $(or $(wildcard $(MODEL)/artifact.json),\
                   $(wildcard $(MODEL)/config.json $(MODEL)/model.safetensors))
TRAIN_ARGS := --epochs $(EPOCHS) --batch-size $(BATCH) --max-seq-length $(MAX_SEQ) \
              --keep $(KEEP) $(if $(PRECISION),--precision $(PRECISION)) $(FINETUNE_FLAGS)
EVAL_ARGS  := $(if $(EVAL_PRECISION),--precision $(EVAL_PRECISION)) $(EVAL_FLAGS)

# The files evaluated: the dev file that selects (required), the task's other dev and test
# files that are present, and AX with the MNLI runs when the diagnostic file exists.
present  = $(foreach s,$(2),$(if $(wildcard $(GLUE)/$(1)/$(s).tsv),$(s)))
file_of  = $(if $(filter ax,$(2)),$(AX),$(GLUE)/$(1)/$(2).tsv)
splits_of = $(firstword $(DEV_$(1))) \
            $(call present,$(1),$(wordlist 2,9,$(DEV_$(1))) $(TEST_$(1))) \
            $(if $(and $(filter MNLI,$(1)),$(wildcard $(AX))),ax)
run_dir = $(RUNS)/$(1)/lr$(2)-seed$(3)
seeds_of = $(or $(SEEDS_$(1)),$(SEEDS))
lrs_of = $(or $(LRS_$(1)),$(LRS))

# finetune: task, lr, seed
define FINETUNE
$(call run_dir,$(1),$(2),$(3))/model/artifact.json: $(MODEL_DEPS) $(GLUE)/$(1)/train.tsv $(GLUE)/$(1)/$(firstword $(DEV_$(1))).tsv
	$(BERTCTL) finetune $(MODEL) $(GLUE)/$(1) --task $(PRESET_$(1)) --lr $(2) --seed $(3) \
	    $(TRAIN_ARGS) --out $$(@D) --force
endef

# eval: task, lr, seed, split
define EVAL
$(call run_dir,$(1),$(2),$(3))/$(4)/artifact.json: $(call run_dir,$(1),$(2),$(3))/model/artifact.json $(call file_of,$(1),$(4))
	$(BERTCTL) eval $$(<D) $(call file_of,$(1),$(4)) $(EVAL_ARGS) $(EVAL_FLAGS_$(1)_$(4)) \
	    --out $$(@D) --force
endef

EVALS :=
DEV_EVALS = $(foreach l,$(call lrs_of,$(1)),$(foreach s,$(call seeds_of,$(1)),\
              $(call run_dir,$(1),$(l),$(s))/$(firstword $(DEV_$(1)))/artifact.json))
$(foreach t,$(TASKS),$(foreach l,$(call lrs_of,$(t)),$(foreach s,$(call seeds_of,$(t)),\
  $(eval $(call FINETUNE,$(t),$(l),$(s)))\
  $(foreach p,$(call splits_of,$(t)),\
    $(eval $(call EVAL,$(t),$(l),$(s),$(p)))\
    $(eval EVALS += $(call run_dir,$(t),$(l),$(s))/$(p)/artifact.json)))))

.PHONY: glue glue-runs glue-report glue-clean
glue: $(RUNS)/summary/artifact.json
	@cat $(RUNS)/summary/summary.md

glue-runs: $(EVALS)

$(RUNS)/summary/artifact.json: $(EVALS)
	$(BERTCTL) glue-summary $(patsubst %/artifact.json,%,$^) --out $(@D) --force

glue-report: $(foreach t,$(TASKS),$(RUNS)/$(t)/report/artifact.json)

$(foreach t,$(TASKS),$(eval $(RUNS)/$(t)/report/artifact.json: $(call DEV_EVALS,$(t))))
$(RUNS)/%/report/artifact.json:
	$(BERTCTL) report $(patsubst %/artifact.json,%,$^) --title "GLUE $*: dev evals" \
	    --out $(@D) --force

glue-clean:
	rm -rf $(RUNS)
