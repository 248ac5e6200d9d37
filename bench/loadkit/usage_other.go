//go:build !linux

package loadkit

import (
	"os"
	"syscall"
	"time"
)

// ChildAttr is nil where the Linux attributes do not exist.
func ChildAttr() *syscall.SysProcAttr { return nil }

// ProcCPU is not available: ErrNoUsage.
func ProcCPU(int) (time.Duration, error) { return 0, ErrNoUsage }

func parseProcStat(string) (time.Duration, error) { return 0, ErrNoUsage }

// ExitUsage is not available: ErrNoUsage.
func ExitUsage(*os.ProcessState) (time.Duration, int64, error) { return 0, 0, ErrNoUsage }

// SelfCPU is not available: ErrNoUsage.
func SelfCPU() (time.Duration, error) { return 0, ErrNoUsage }

// PeakRSS is not available: ErrNoUsage.
func PeakRSS(int) (int64, error) { return 0, ErrNoUsage }

// RSS is not available: ErrNoUsage.
func RSS(int) (int64, error) { return 0, ErrNoUsage }

// TCPConns is not available: ErrNoUsage.
func TCPConns(int, ...int) (int, error) { return 0, ErrNoUsage }
