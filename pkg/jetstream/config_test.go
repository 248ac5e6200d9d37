package jetstream

import (
	"strings"
	"testing"

	"github.com/fanout/fanout/pkg/event"
)

func TestConfigValidate(t *testing.T) {
	l := event.DefaultLimits()
	if err := DefaultConfig().validate(l); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(*Config, *event.Limits)
	}{
		{"empty bucket", "Bucket: 0 bytes", func(c *Config, _ *event.Limits) { c.Bucket = "" }},
		{"long bucket", "Bucket: 65 bytes", func(c *Config, _ *event.Limits) { c.Bucket = strings.Repeat("b", 65) }},
		{"dotted bucket", "Bucket: \"a.b\": byte '.'", func(c *Config, _ *event.Limits) { c.Bucket = "a.b" }},
		{"replicas", "Replicas: 0", func(c *Config, _ *event.Limits) { c.Replicas = 0 }},
		{"attempts", "MaxAttempts: 0", func(c *Config, _ *event.Limits) { c.MaxAttempts = 0 }},
		{"outbox", "OutboxBytes: 10", func(c *Config, _ *event.Limits) { c.OutboxBytes = 10 }},
		{"now", "Now: nil", func(c *Config, _ *event.Limits) { c.Now = nil }},
		{"logger", "Logger: nil", func(c *Config, _ *event.Limits) { c.Logger = nil }},
		{"task_id too long", "max_control_line", func(_ *Config, l *event.Limits) { l.MaxTaskIDBytes = 2000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, l := DefaultConfig(), event.DefaultLimits()
			tc.edit(&c, &l)
			if err := c.validate(l); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
