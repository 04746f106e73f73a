# The front door: every target is a thin call into hack/ or test/.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## compile every package and the controller
	go build ./...

.PHONY: test-unit
test-unit: ## fast layers: build, vet, gofmt, generated code, unit and reconciler table tests
	hack/test-unit.sh

.PHONY: test
test: test-unit ## every test: the fast layers first, then the ones on the local stack, then under Knative Serving
	hack/test-stack.sh --with-serving

.PHONY: conformance
conformance: ## Knative's ingress conformance suite on the local stack (ITERATIONS=4: four copies at once, soak)
	hack/conformance.sh --iterations $${ITERATIONS:-1}

.PHONY: test-faults
test-faults: ## the fault tests on the local stack (also part of make test)
	E2E_RUN=TestFault hack/test-stack.sh

.PHONY: test-serving
test-serving: ## Knative Serving v0.50.0 on the stack: its API conformance suite and our Serving rollout tests (sudden and gradual)
	hack/test-serving.sh

.PHONY: test-serving-e2e
test-serving-e2e: ## Knative Serving's e2e suite (knative.dev/serving/test/e2e@v0.50.0, unmodified) on the stack with hitless, a row per test
	hack/test-serving.sh --e2e

.PHONY: test-serving-tls
test-serving-tls: ## Knative Serving's encryption suites (cluster-local, system-internal, external-domain TLS, HTTP-01 via pebble; unmodified) with cert-manager on the stack
	hack/test-serving.sh --tls

.PHONY: run-serving
run-serving: ## the stack, Knative Serving and the controller, a helloworld Knative Service and the curl that reaches it
	hack/run.sh --serving

.PHONY: codegen
codegen: ## regenerate pkg/client
	hack/update-codegen.sh

.PHONY: verify-codegen
verify-codegen: ## fail if pkg/client is not what codegen makes
	hack/verify-codegen.sh

.PHONY: stack-up
stack-up: ## bring the local stack up (idempotent)
	hack/stack.sh up

.PHONY: stack-down
stack-down: ## stop every process of the local stack and remove its namespaces
	hack/stack.sh down

.PHONY: stack-env
stack-env: ## print KUBECONFIG and INGRESS_ADDRESS of the local stack
	@hack/stack.sh env

.PHONY: run
run: ## bring the stack up, run the controller on it and apply the demo
	hack/run.sh

.PHONY: release
release: ## dist/release.yaml (image resolved by ko, built into dist/oci, pushed nowhere) and dist/contour.yaml
	hack/release.sh

.PHONY: release-check
release-check: ## on the local stack: server dry run of dist/*.yaml, and the released controller image started
	hack/release.sh check

.PHONY: bench-rollout
bench-rollout: ## plain flip and hitless swaps under load, one run (SWAPS=100 RPS=200; used stack: CHURN=300), table + docs/rollout.svg
	hack/bench.sh rollout -swaps $${SWAPS:-100} -rps $${RPS:-200} -churn-pods $${CHURN:-0} -svg docs/rollout.svg

.PHONY: bench-scale
bench-scale: ## N KIngresses to Ready, then 100 rollouts at once: hitless and the floor (no controller) side by side (KINGRESSES=1000; MODES=hitless; REPLICAS=3)
	hack/bench.sh scale -kingresses $${KINGRESSES:-1000} -modes $${MODES:-hitless,floor}

.PHONY: bench-recovery
bench-recovery: ## N KIngresses Ready, then the controller killed and started, then the API server down 30 s: what hitless and the floor each spend to come back (KINGRESSES=1000)
	hack/bench.sh scale -kingresses $${KINGRESSES:-1000} -modes $${MODES:-hitless,floor} -recovery controller,api-server -outage $${OUTAGE:-30s}

.PHONY: bench-scale-curve
bench-scale-curve: ## bench-scale at 250, 500, 1,000 and 2,000 KIngresses in turn, hitless and the floor at each: the growth curve as a table + docs/scale.svg
	hack/bench.sh scale -kingresses $${KINGRESSES:-250,500,1000,2000} -modes $${MODES:-hitless,floor} -svg docs/scale.svg

.PHONY: fuzz
fuzz: ## fuzz the builders (FUZZTIME=1m by default)
	go test ./pkg/resources -run '^$$' -fuzz FuzzMakeServing -fuzztime $${FUZZTIME:-1m}
