#!/bin/bash
cp .ort2/$1 /tmp/ortp/ && ls -la /tmp/ortp
