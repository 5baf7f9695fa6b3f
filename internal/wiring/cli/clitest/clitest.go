// Package clitest helps the binaries' tests reach the operations server
// of package cli.
package clitest

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// Scrape GETs path from the server at addr and returns the status code and
// body; a transport error fails the test.
func Scrape(t testing.TB, addr net.Addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
