//go:build !linux

package loadgen

import (
	"os"
	"syscall"
	"time"
)

func childAttr() *syscall.SysProcAttr { return nil }

func procCPU(int) (time.Duration, error) { return 0, errNoUsage }

func parseProcStat(string) (time.Duration, error) { return 0, errNoUsage }

func exitUsage(*os.ProcessState) (time.Duration, int64, error) { return 0, 0, errNoUsage }

func selfCPU() (time.Duration, error) { return 0, errNoUsage }
