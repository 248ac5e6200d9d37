package loadkit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"runtime"
	"testing"
	"time"
)

// Settle forces a collection through the pprof handler and returns this process's
// resident set once it stops falling.
func TestSettle(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	mux := http.NewServeMux()
	hits := 0
	mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, r *http.Request) {
		hits++
		pprof.Index(w, r)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	s, err := Settle(context.Background(), []int{os.Getpid()}, []string{srv.URL + "/debug/pprof/heap?gc=1"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if hits != 1 || len(s.RSS) != 1 || s.RSS[0] <= 0 || s.Waited < SettleQuiet-settlePoll {
		t.Fatalf("hits %d, %+v", hits, s)
	}
	if _, err := Settle(context.Background(), []int{os.Getpid()}, []string{srv.URL + "/nothing"}, time.Second); err == nil {
		t.Fatal("a GC URL answering 404: no error")
	}
}
