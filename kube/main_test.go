package kube_test

import (
	"flag"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/internal/leaf/testwait"
)

func TestMain(m *testing.M) {
	flag.Parse()
	eventually = testwait.Bound()
	goleak.VerifyTestMain(m)
}

// eventually bounds a wait for an event: it ends only shortly before the
// binary's -timeout, so it catches a hung test and never fails a slow one.
var eventually time.Duration
