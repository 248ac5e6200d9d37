package main

import (
	"strings"
	"testing"
)

func TestPayloadText(t *testing.T) {
	long := strings.Repeat("abcdefghij", 7) // 70 characters
	for _, tc := range []struct {
		name    string
		payload string
		full    bool
		want    string
	}{
		{"text", `{"status":"UP"}`, false, `{"status":"UP"}`},
		{"empty", "", false, ""},
		{"unicode text", "état ✓", false, "état ✓"},
		{"binary", "\x00\x01\xff", false, "base64:AAH/"},
		{"invalid utf-8", "caf\xe9", false, "base64:Y2Fm6Q=="},
		{"newline", "two\nlines", false, "base64:dHdvCmxpbmVz"},
		{"tab", "a\tb", false, "base64:YQli"},
		{"text that looks encoded", "base64:AAH/", false, "base64:YmFzZTY0OkFBSC8="},
		{"exactly the width", long[:payloadWidth], false, long[:payloadWidth]},
		{"cut", long, false, long[:payloadWidth-1] + "…"},
		{"cut by characters, not bytes", strings.Repeat("é", 70), false, strings.Repeat("é", payloadWidth-1) + "…"},
		{"cut binary", strings.Repeat("\x00", 60), false, "base64:" + strings.Repeat("A", payloadWidth-len("base64:")-1) + "…"},
		{"full", long, true, long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := payloadText([]byte(tc.payload), tc.full); got != tc.want {
				t.Fatalf("payloadText(%q) = %q, want %q", tc.payload, got, tc.want)
			}
		})
	}
}
