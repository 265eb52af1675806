// The process-group layer of ddp: groups, collectives, backends, errors.
#pragma once
#include "ddp/dist/backend.h"
#include "ddp/dist/collectives.h"
#include "ddp/dist/device.h"
#include "ddp/dist/errors.h"
#include "ddp/dist/init.h"
#include "ddp/dist/process_group.h"
#include "ddp/dist/store.h"
#include "ddp/dist/types.h"
#include "ddp/dist/work.h"
