# Included by every pipeline. The paths a user gives (CORPUS=examples/corpus, RUNS=runs/x) are
# relative to where they typed make, but `make -C pipelines` runs from pipelines/, and so do the
# sub-makes the top Makefile starts. So every path variable is resolved against the directory
# make was started from: the shell's PWD, handed to sub-makes on their command line as
# PIPELINES_START (a sub-make's shell would report pipelines/). Not exported: the programs the
# recipes run (the test suite's own makes among them) must not inherit it.
PIPELINES_START ?= $(or $(PWD),$(CURDIR))
START := $(PIPELINES_START)

# from_start PATHS: each relative path of a list (globs too) made absolute from START.
from_start = $(foreach p,$(1),$(if $(filter /% ~%,$(p)),$(p),$(START)/$(p)))
# resolve VARS: each variable replaced by its resolved value (a command-line value too).
resolve = $(foreach v,$(1),$(eval override $(v) := $(call from_start,$($(v)))))
# must_exist VARS: stop with one line naming the variable, the path and where it was read from.
must_exist = $(foreach v,$(1),$(foreach p,$($(v)),$(if $(wildcard $(p)),,\
  $(error $(v)=$(p): no such file or directory (paths are read from $(START))))))
# must_be_duration VARS: stop with one line unless each (set) variable is a duration bertctl's
# --time-budget takes (90s, 30m, 2h, 1d, or seconds), when make reads the file: before any stage.
_DURATION := [0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?|([0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?[smhd])+
must_be_duration = $(foreach v,$(1),$(if $(strip $($(v))),$(if $(shell echo '$($(v))' | grep -Eix \
  '$(_DURATION)'),,$(error $(v)=$($(v)) is not a duration: give e.g. 90s, 30m, 2h, 1d or seconds))))
