package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/fanout/fanout/pkg/client"
)

// The examples run against a sidecar TestMain starts (exampleAddr); an app passes
// its sidecar's --app-addr, by default 127.0.0.1:7070.

func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, exampleAddr) // e.g. "127.0.0.1:7070" or "unix:///run/fanout.sock"
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	r, err := c.Put(ctx, "example/flags/dark-mode", []byte("on"), client.WithAck(client.All), client.WithAckTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("put:", r.Outcome, "satisfied:", r.Satisfied)

	got, err := c.Get(ctx, "example/flags/dark-mode")
	if err != nil {
		log.Fatal(err)
	}
	e := got["example/flags/dark-mode"]
	fmt.Printf("get: %s from %s, same version: %v\n", e.Value, e.Origin, e.Version == r.Version)

	// An older version than the sidecar holds is STALE: nothing changes.
	_, err = c.Put(ctx, "example/flags/dark-mode", []byte("off"), client.WithVersion(1))
	fmt.Println("stale:", errors.Is(err, client.ErrStale))

	if _, err := c.Delete(ctx, "example/flags/dark-mode"); err != nil {
		log.Fatal(err)
	}
	got, _ = c.Get(ctx, "example/flags/dark-mode")
	fmt.Println("after delete:", len(got), "keys")
	// Output:
	// put: EVENT_OUTCOME_ACCEPTED satisfied: true
	// get: on from example, same version: true
	// stale: true
	// after delete: 0 keys
}

func ExampleClient_List() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, exampleAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if _, err := c.Put(ctx, "example/list/"+k, []byte(k)); err != nil {
			log.Fatal(err)
		}
	}
	token := ""
	for {
		page, err := c.List(ctx, "example/list/", 2, token)
		if err != nil {
			log.Fatal(err)
		}
		var keys []string
		for _, e := range page.Entries {
			keys = append(keys, e.Key)
		}
		fmt.Println(strings.Join(keys, " "))
		if token = page.Next; token == "" {
			break
		}
	}
	// Output:
	// example/list/a example/list/b
	// example/list/c example/list/d
	// example/list/e
}

func ExampleClient_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, exampleAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "example/watch/x", []byte("1")); err != nil {
		log.Fatal(err)
	}

	w := c.Watch(ctx, "example/watch/")
	defer w.Close()
	for {
		ev, err := w.Next() // resumes by itself after a broken stream
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Type {
		case client.EventSynced: // every key that was there has been delivered
			fmt.Println("synced")
			if _, err := c.Put(ctx, "example/watch/x", []byte("2")); err != nil {
				log.Fatal(err)
			}
			if _, err := c.Delete(ctx, "example/watch/x"); err != nil {
				log.Fatal(err)
			}
		case client.EventPut:
			fmt.Printf("put %s = %s\n", ev.Entry.Key, ev.Entry.Value)
		case client.EventDelete:
			fmt.Printf("delete %s\n", ev.Entry.Key)
			return
		}
	}
	// Output:
	// put example/watch/x = 1
	// synced
	// put example/watch/x = 2
	// delete example/watch/x
}

func ExampleCache() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, exampleAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "example/cache/a", []byte("1")); err != nil {
		log.Fatal(err)
	}

	cache := client.NewCache(c, "example/cache/")
	deleted := make(chan string, 1)
	cache.AddHandlers(client.Handlers{
		OnAdd:    func(e client.Entry) { fmt.Printf("add %s = %s\n", e.Key, e.Value) },
		OnDelete: func(last client.Entry) { deleted <- last.Key },
	})
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { cache.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()
	if err := cache.WaitForSync(ctx); err != nil {
		log.Fatal(err)
	}
	e, ok := cache.Get("example/cache/a") // from the local map: no call
	fmt.Println("synced:", cache.HasSynced(), string(e.Value), ok)

	if _, err := c.Delete(ctx, "example/cache/a"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", <-deleted, "keys left:", cache.Len())
	// Output:
	// add example/cache/a = 1
	// synced: true 1 true
	// deleted: example/cache/a keys left: 0
}

func ExamplePublisher() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, exampleAddr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := client.NewPublisher(c, client.PublisherConfig{MaxBytes: 32 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	// Many goroutines may Put at once: their events share requests on one stream.
	var pending []*client.Pending
	for i := range 100 {
		f, err := p.Put(ctx, fmt.Sprintf("example/pub/k%03d", i), []byte("v"))
		if err != nil {
			log.Fatal(err) // ctx ended while MaxBytes were in use, or p was closed
		}
		pending = append(pending, f)
	}
	if err := p.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	accepted := 0
	for _, f := range pending {
		if r, err := f.Wait(ctx); err == nil && r.Outcome == client.Accepted {
			accepted++
		}
	}
	fmt.Println("accepted:", accepted)
	// Output:
	// accepted: 100
}
