# Included by the pretraining pipelines (pretrain.mk, modern.mk): how a pretrain run is
# launched (bertctl, or torchrun across NPROC processes and NNODES nodes) and how nodes other
# than 0 wait for what node 0 builds. The variables are documented in pretrain.mk.

TORCHRUN ?= $(if $(wildcard $(VENV_BIN)/torchrun),$(VENV_BIN)/torchrun,torchrun)
NPROC    ?= 1
NNODES   ?= 1
NODE_RANK ?= 0
RDZV_ENDPOINT ?= localhost:29500
RDZV_ID  ?= bertctl-pretrain
RDZV_BACKEND ?= c10d
WAIT     ?= 86400

DISTRIBUTED := $(filter-out 1,$(NPROC) $(NNODES))
MULTINODE   := $(filter-out 1,$(NNODES))
RENDEZVOUS  := $(if $(MULTINODE),--rdzv-backend=$(RDZV_BACKEND) --rdzv-endpoint=$(RDZV_ENDPOINT) \
                 --rdzv-id=$(RDZV_ID),--standalone)
PRETRAIN    := $(if $(DISTRIBUTED),$(TORCHRUN) --nnodes=$(NNODES) --nproc-per-node=$(NPROC) \
                 $(RENDEZVOUS) -m bertctl pretrain,$(BERTCTL) pretrain)

# Wait up to WAIT seconds for the target to exist and be no older than its prerequisites
# (node 0 touches what it builds, so an artifact bertctl found up to date counts too).
wait_for = for i in $$(seq $(WAIT)); do \
             if [ -f $@ ]; then ok=1; for p in $^; do [ $$p -nt $@ ] && ok=; done; \
               [ -n "$$ok" ] && exit 0; fi; sleep 1; done; \
           echo "$(notdir $(firstword $(MAKEFILE_LIST))): timed out waiting for $@ (from node 0)" >&2; exit 1
# After torchrun, rank 0 (on some node) has written the artifact; give a shared file system
# the time to show it here.
wait_shared = for i in $$(seq 600); do [ -f $@ ] && exit 0; sleep 1; done; \
              echo "$(notdir $(firstword $(MAKEFILE_LIST))): $@ did not appear" >&2; exit 1
# On nodes other than 0, wait for what node 0 builds instead of building it.
on_node0 = $(if $(filter-out 0,$(NODE_RANK)),$(wait_for),$(1) && touch $@)

