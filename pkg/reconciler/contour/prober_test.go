package contour

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/time/rate"
)

func TestLimitLinesKeepsABudgetAndCountsWhatItDropped(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	budget := newLineBudget(20, 2)
	budget.limiter.SetLimit(0) // the burst only, until told otherwise
	// Every logger limited by one budget shares it, with fields or not.
	logger := budget.limit(zap.New(obs).Sugar()).With("key", "a")
	other := budget.limit(zap.New(obs).Sugar().With("key", "b"))

	logger.Debug("below the level: neither written nor counted")
	for i := 0; i < 3; i++ {
		logger.Errorf("probe %d failed", i)
		other.Infof("probe %d queued", i)
	}
	if got := logs.Len(); got != 2 {
		t.Fatalf("%d lines written, want the burst of 2", got)
	}
	budget.limiter.SetLimit(rate.Inf)
	logger.Info("next")
	last := logs.All()[2].Message
	if want := "next (4 prober log lines dropped before this one: at most 20 a second are written)"; last != want {
		t.Errorf("line after the drops = %q, want %q", last, want)
	}
	logger.Info("then")
	if last := logs.All()[3].Message; strings.Contains(last, "dropped") {
		t.Errorf("the count was reported twice: %q", last)
	}
}
