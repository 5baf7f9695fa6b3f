package cli_test

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"k8s.io/klog/v2"

	"github.com/dynmig/dynmig/internal/wiring/cli"
)

// A binary registers the common flags, builds its logger from them and
// serves its probes.
func Example() {
	fs := flag.NewFlagSet("dynmig-example", flag.ContinueOnError)
	common := cli.Register(fs)
	_ = fs.Parse([]string{"-log-format=json", "-v=2"})
	log, err := common.Logger(io.Discard, "dynmig-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer klog.ClearLogger()
	log.Info("started")

	rec := httptest.NewRecorder()
	cli.Ops{Ready: func() error { return nil }}.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	fmt.Println(common.Format, common.EffectiveLevel(), rec.Code)
	// Output: json DEBUG+2 200
}
