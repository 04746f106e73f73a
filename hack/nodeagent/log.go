package main

import (
	"fmt"
	"log/slog"
	"os"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
)

// vkLogger adapts slog to virtual-kubelet's logger interface; unlike the
// upstream adapter it accepts any value (errors included) as the message.
type vkLogger struct{ l *slog.Logger }

var _ vklog.Logger = vkLogger{}

func (v vkLogger) Debug(a ...any)            { v.l.Debug(fmt.Sprint(a...)) }
func (v vkLogger) Debugf(f string, a ...any) { v.l.Debug(fmt.Sprintf(f, a...)) }
func (v vkLogger) Info(a ...any)             { v.l.Info(fmt.Sprint(a...)) }
func (v vkLogger) Infof(f string, a ...any)  { v.l.Info(fmt.Sprintf(f, a...)) }
func (v vkLogger) Warn(a ...any)             { v.l.Warn(fmt.Sprint(a...)) }
func (v vkLogger) Warnf(f string, a ...any)  { v.l.Warn(fmt.Sprintf(f, a...)) }
func (v vkLogger) Error(a ...any)            { v.l.Error(fmt.Sprint(a...)) }
func (v vkLogger) Errorf(f string, a ...any) { v.l.Error(fmt.Sprintf(f, a...)) }
func (v vkLogger) Fatal(a ...any)            { v.l.Error(fmt.Sprint(a...)); os.Exit(1) }
func (v vkLogger) Fatalf(f string, a ...any) { v.l.Error(fmt.Sprintf(f, a...)); os.Exit(1) }

func (v vkLogger) WithField(k string, val any) vklog.Logger { return vkLogger{v.l.With(k, val)} }
func (v vkLogger) WithError(err error) vklog.Logger         { return vkLogger{v.l.With("err", err)} }
func (v vkLogger) WithFields(f vklog.Fields) vklog.Logger {
	args := make([]any, 0, 2*len(f))
	for _, k := range sortedKeys(f) {
		args = append(args, k, f[k])
	}
	return vkLogger{v.l.With(args...)}
}
