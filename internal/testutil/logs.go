package testutil

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// CaptureLogs returns a context whose logger records every entry up to
// verbosity v, and a function returning what was recorded.
func CaptureLogs(t testing.TB, v int) (context.Context, func() ktesting.Log) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(v)))
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
	return klog.NewContext(context.Background(), logger), buf.Data
}

// LogEntryKV is an entry's key/value pairs, WithValues' and the call's, as
// strings.
func LogEntryKV(e ktesting.LogEntry) map[string]string {
	kv := map[string]string{}
	for _, l := range [][]any{e.WithKVList, e.ParameterKVList} {
		for i := 0; i+1 < len(l); i += 2 {
			kv[fmt.Sprint(l[i])] = fmt.Sprint(l[i+1])
		}
	}
	return kv
}
