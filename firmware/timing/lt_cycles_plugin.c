/* lowtide's cycle model: a QEMU TCG plugin that charges each Thumb instruction a Cortex-M core executes the cycles
 * the core's Technical Reference Manual gives it, and reports the cycles between the firmware's timing marks.
 *
 * Licence: a plugin loaded into QEMU is under QEMU's terms: GPL-2.0-or-later. It is built against QEMU's published
 * plugin header (include/qemu/qemu-plugin.h, API version 1, QEMU 7.2) by lowtide (host/lowtide/device/drivers/
 * cycle_model.py) with the host C compiler, into the user cache.
 *
 * Arguments (`-plugin PATH,core=m4,out=FILE`):
 *   core  m4 | m33 | m55 | m7: which core's timing to apply.
 *   out   the file the windows are written to, one line per window as it closes: "<cycles> <instructions>".
 *
 * Marks (firmware/bsp/lt_timing.h): the hint `DBG #1` opens a window, `DBG #2` closes it. DBG executes as a NOP on
 * the cores and in QEMU, and no compiler emits it, so the plugin recognises it by its encoding.
 *
 * What the model assumes: zero-wait-state memory for code and data (the MPS2/MPS3 SSRAM the boards run from), no
 * caches, no bus contention, interrupts entered as ordinary branches. Costs are per instruction class, from the
 * TRM's instruction timing tables (Cortex-M4 r0p1 table 3-1; the M33 and M55 share the M4's scalar costs, the M55
 * adding its load-use stall and Helium's beats, see m4_cost), and for the Cortex-M7, whose TRM gives no table, from
 * its description of the dual-issue pipeline (see m7_* below). The static cost of a translation block is computed once, when QEMU
 * translates it; what depends on the path taken (a taken branch's refill, the M7's branch prediction) is charged
 * when the next block starts.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* The marks: DBG #option (T1: 0xF3AF 0x80F0 | option). firmware/bsp/lt_timing.h emits them. */
#define MARK_BEGIN 1u
#define MARK_END 2u

enum core { CORE_M4, CORE_M33, CORE_M55, CORE_M7 };

enum kind {
  K_ALU,         /* data processing, moves, hints: 1 cycle */
  K_LOAD,        /* single load (LDR, LDRB, LDRH, LDRSx, VLDR.32) */
  K_STORE,       /* single store */
  K_LOAD_PAIR,   /* LDRD, VLDR.64 */
  K_STORE_PAIR,  /* STRD, VSTR.64 */
  K_LOAD_MULTI,  /* LDM, POP, VLDM, VPOP: `regs` registers */
  K_STORE_MULTI, /* STM, PUSH, VSTM, VPUSH */
  K_MUL,         /* MUL, MLA, long multiplies, DSP multiplies */
  K_DIV,         /* SDIV, UDIV */
  K_FP,          /* single-cycle FPU data processing */
  K_FP_MAC,      /* VMLA, VMLS, VNMLA, VNMLS, VFMA, VFMS */
  K_FP_LONG,     /* VDIV, VSQRT */
  K_BRANCH,      /* B, BL: always taken */
  K_BRANCH_COND, /* B<cond>, CBZ, CBNZ */
  K_BRANCH_INDIRECT, /* BX, BLX reg, MOV/ADD PC, TBB/TBH, loads to PC */
  K_BARRIER,     /* DSB, DMB, ISB */
  K_VECTOR_MEM,  /* Helium (MVE): vector loads and stores */
  K_VECTOR,      /* Helium: vector arithmetic, multiply-accumulate, reductions */
};

typedef struct {
  enum kind kind;
  unsigned regs;      /* registers an LDM/STM-like instruction transfers */
  bool reg_offset;    /* a load or store addressed by register offset */
  bool is_call;       /* BL, BLX: pushes a return address (the M7's return stack) */
  bool is_return;     /* BX LR, POP {..., PC}: pops one */
  bool writes_pc;     /* a load that writes PC: LDM/POP with PC, LDR PC */
  bool loop_end;      /* LE, LETP: the low-overhead loop's branch back */
  int mark;           /* MARK_BEGIN / MARK_END, or 0 */
  uint16_t dst;       /* core registers written (bit n = Rn) */
  uint16_t src;       /* core registers read */
  uint16_t addr;      /* core registers a load or store forms its address from */
  uint16_t acc;       /* a multiply-accumulate's accumulator registers (also in `src`): read late */
} insn_t;

static unsigned popcount16(uint32_t v) { return (unsigned)__builtin_popcount(v & 0xFFFFu); }
#define R(n) ((uint16_t)(1u << ((n) & 15u)))

/* Classify one Thumb instruction: `hw1` its first halfword, `hw2` its second (32-bit encodings). Architecture
 * encodings: ARMv7-M / ARMv8-M Architecture Reference Manual, "Thumb instruction set encoding". */
static insn_t decode(uint32_t hw1, uint32_t hw2, bool wide) {
  insn_t d = {.kind = K_ALU};
  if (!wide) {
    if ((hw1 & 0xF800u) == 0xE000u) { d.kind = K_BRANCH; return d; }                          /* B T2 */
    if ((hw1 & 0xF000u) == 0xD000u) {                                                         /* B<c> T1, UDF, SVC */
      if ((hw1 & 0x0E00u) != 0x0E00u) d.kind = K_BRANCH_COND;
      return d;
    }
    if ((hw1 & 0xF500u) == 0xB100u) { d.kind = K_BRANCH_COND; d.src = R(hw1 & 7u); return d; } /* CBZ, CBNZ */
    if ((hw1 & 0xFF00u) == 0x4700u) {                                                         /* BX, BLX */
      unsigned rm = (hw1 >> 3) & 15u;
      d.kind = K_BRANCH_INDIRECT;
      d.src = R(rm);
      d.is_call = (hw1 & 0x80u) != 0;
      d.is_return = !d.is_call && rm == 14u;
      return d;
    }
    if ((hw1 & 0xFC00u) == 0x4400u) {                                                         /* ADD, CMP, MOV hi */
      unsigned rd = ((hw1 >> 4) & 8u) | (hw1 & 7u), rm = (hw1 >> 3) & 15u;
      d.src = R(rm) | R(rd);
      d.dst = ((hw1 & 0x0300u) == 0x0100u) ? 0 : R(rd);
      if (rd == 15u && (hw1 & 0x0300u) != 0x0100u) d.kind = K_BRANCH_INDIRECT;
      return d;
    }
    if ((hw1 & 0xFE00u) == 0xB400u) {                                                         /* PUSH */
      d.kind = K_STORE_MULTI;
      d.regs = popcount16(hw1 & 0xFFu) + ((hw1 >> 8) & 1u);
      d.addr = R(13);
      return d;
    }
    if ((hw1 & 0xFE00u) == 0xBC00u) {                                                         /* POP */
      d.kind = K_LOAD_MULTI;
      d.regs = popcount16(hw1 & 0xFFu) + ((hw1 >> 8) & 1u);
      d.dst = (uint16_t)(hw1 & 0xFFu);
      d.addr = R(13);
      d.writes_pc = d.is_return = (hw1 & 0x100u) != 0;
      return d;
    }
    if ((hw1 & 0xF000u) == 0xC000u) {                                                         /* STM, LDM */
      d.kind = (hw1 & 0x0800u) ? K_LOAD_MULTI : K_STORE_MULTI;
      d.regs = popcount16(hw1 & 0xFFu);
      d.addr = R((hw1 >> 8) & 7u);
      if (d.kind == K_LOAD_MULTI) d.dst = (uint16_t)(hw1 & 0xFFu);
      return d;
    }
    if ((hw1 & 0xF000u) == 0x5000u) {                                                         /* LDR/STR (register) */
      unsigned op = (hw1 >> 9) & 7u;
      d.kind = (op >= 3u) ? K_LOAD : K_STORE;
      d.reg_offset = true;
      d.addr = R((hw1 >> 3) & 7u) | R((hw1 >> 6) & 7u);
      if (d.kind == K_LOAD) d.dst = R(hw1 & 7u); else d.src = R(hw1 & 7u);
      return d;
    }
    if ((hw1 & 0xE000u) == 0x6000u || (hw1 & 0xF000u) == 0x8000u) {                          /* LDR/STR(B/H) imm */
      d.kind = (hw1 & 0x0800u) ? K_LOAD : K_STORE;
      d.addr = R((hw1 >> 3) & 7u);
      if (d.kind == K_LOAD) d.dst = R(hw1 & 7u); else d.src = R(hw1 & 7u);
      return d;
    }
    if ((hw1 & 0xF000u) == 0x9000u) {                                                         /* LDR/STR SP-relative */
      d.kind = (hw1 & 0x0800u) ? K_LOAD : K_STORE;
      d.addr = R(13);
      if (d.kind == K_LOAD) d.dst = R((hw1 >> 8) & 7u); else d.src = R((hw1 >> 8) & 7u);
      return d;
    }
    if ((hw1 & 0xF800u) == 0x4800u) { d.kind = K_LOAD; d.dst = R((hw1 >> 8) & 7u); return d; } /* LDR literal */
    if ((hw1 & 0xFFC0u) == 0x4340u) { d.kind = K_MUL; d.dst = R(hw1 & 7u); d.src = R(hw1 & 7u) | R((hw1 >> 3) & 7u); return d; }
    if ((hw1 & 0xFC00u) == 0x4000u) { d.dst = R(hw1 & 7u); d.src = R(hw1 & 7u) | R((hw1 >> 3) & 7u); return d; }
    if ((hw1 & 0xC000u) == 0x0000u) {                                                         /* shift, add, sub, mov, cmp */
      if ((hw1 & 0xE000u) == 0x2000u) { d.dst = R((hw1 >> 8) & 7u); d.src = d.dst; }
      else { d.dst = R(hw1 & 7u); d.src = R((hw1 >> 3) & 7u) | R((hw1 >> 6) & 7u); }
      return d;
    }
    if ((hw1 & 0xF000u) == 0xA000u) { d.dst = R((hw1 >> 8) & 7u); return d; }                /* ADR, ADD SP */
    if ((hw1 & 0xFF00u) == 0xBF00u) return d;                                                 /* IT, hints */
    d.dst = R(hw1 & 7u);
    d.src = R((hw1 >> 3) & 7u);
    return d;                                                                                 /* extend, rev, ... */
  }

  unsigned rn = hw1 & 15u, rt = (hw2 >> 12) & 15u, rd = (hw2 >> 8) & 15u, rm = hw2 & 15u;
  if ((hw1 & 0xFE40u) == 0xE800u) {                                                           /* LDM, STM (T2) */
    bool load = (hw1 & 0x10u) != 0;
    d.kind = load ? K_LOAD_MULTI : K_STORE_MULTI;
    d.regs = popcount16(hw2);
    d.addr = R(rn);
    if (load) {
      d.dst = (uint16_t)hw2;
      d.writes_pc = (hw2 & 0x8000u) != 0;
      d.is_return = d.writes_pc && rn == 13u;
    } else {
      d.src = (uint16_t)hw2;
    }
    return d;
  }
  if ((hw1 & 0xFE40u) == 0xE840u) {                                                           /* LDRD/STRD, excl, TB */
    if ((hw1 & 0xFFF0u) == 0xE8D0u && (hw2 & 0xFFE0u) == 0xF000u) {                          /* TBB, TBH */
      d.kind = K_BRANCH_INDIRECT;
      d.addr = R(rn) | R(rm); /* a table load: K_BRANCH_INDIRECT with an address is TBB/TBH */
      return d;
    }
    bool load = (hw1 & 0x10u) != 0;
    if ((hw1 & 0x0120u) == 0) {                                                               /* LDREX, STREX: single */
      d.kind = load ? K_LOAD : K_STORE;
      d.addr = R(rn);
      if (load) d.dst = R(rt); else d.src = R(rt);
      return d;
    }
    d.kind = load ? K_LOAD_PAIR : K_STORE_PAIR;
    d.addr = R(rn);
    if (load) d.dst = R(rt) | R(rd); else d.src = R(rt) | R(rd);
    return d;
  }
  if ((hw1 & 0xFE00u) == 0xEA00u) { d.dst = R(rd); d.src = R(rn) | R(rm); return d; }      /* DP shifted register */
  if ((hw1 & 0xEC00u) == 0xEC00u && (hw2 & 0x0E00u) == 0x0E00u) {                            /* MVE: coprocessor 14/15 */
    d.kind = (hw1 & 0xEE00u) == 0xEC00u ? K_VECTOR_MEM : K_VECTOR;
    d.addr = d.kind == K_VECTOR_MEM ? R(rn) : 0;
    return d;
  }
  if ((hw1 & 0xEF00u) == 0xEF00u) { d.kind = K_VECTOR; return d; }                          /* MVE: vector data processing */
  if ((hw1 & 0xFFDFu) == 0xF00Fu && (hw2 & 0xF001u) == 0xC001u) {                            /* LE, LETP */
    d.kind = K_BRANCH_COND;
    d.loop_end = true;
    return d;
  }
  if ((hw1 & 0xEC00u) == 0xEC00u && (hw2 & 0x0E00u) == 0x0A00u) {                            /* FP (coprocessor 10/11) */
    if ((hw1 & 0xEE00u) == 0xEC00u) {                                                         /* FP loads and stores */
      bool load = (hw1 & 0x10u) != 0, dbl = (hw2 & 0x100u) != 0;
      unsigned puw = ((hw1 >> 6) & 6u) | ((hw1 >> 5) & 1u);                                   /* P U W */
      d.addr = R(rn);
      if ((hw1 & 0xFFE0u) == 0xEC40u) { d.dst = R(rt) | R(rd); return d; }                  /* VMOV core pair */
      if ((puw & 5u) == 4u) {                                                                 /* P=1, W=0: VLDR, VSTR */
        d.kind = dbl ? (load ? K_LOAD_PAIR : K_STORE_PAIR) : (load ? K_LOAD : K_STORE);
        return d;
      }
      d.kind = load ? K_LOAD_MULTI : K_STORE_MULTI;                                           /* VLDM, VSTM, VPUSH, VPOP */
      d.regs = hw2 & 0xFFu;                                                                   /* words */
      return d;
    }
    if (hw2 & 0x10u) {                                                                        /* VMOV core, VMRS, VMSR */
      d.dst = (hw1 & 0x10u) ? R(rt) : 0;
      d.src = (hw1 & 0x10u) ? 0 : R(rt);
      return d;
    }
    unsigned opc1 = ((hw1 >> 4) & 0xBu);
    if (opc1 == 0x8u) { d.kind = K_FP_LONG; return d; }                                       /* VDIV */
    if (opc1 == 0xBu && (hw1 & 0xFu) == 1u && (hw2 & 0xC0u) == 0xC0u) { d.kind = K_FP_LONG; return d; } /* VSQRT */
    if (opc1 == 0x0u || opc1 == 0x1u || opc1 == 0xAu || opc1 == 0x9u) { d.kind = K_FP_MAC; return d; }
    d.kind = K_FP;
    return d;
  }
  if ((hw1 & 0xF800u) == 0xF000u && (hw2 & 0x8000u)) {                                       /* branches, misc control */
    if ((hw2 & 0xD000u) == 0xD000u) { d.kind = K_BRANCH; d.is_call = true; d.dst = R(14); return d; } /* BL */
    if ((hw2 & 0xD000u) == 0x9000u) { d.kind = K_BRANCH; return d; }                          /* B T4 */
    if ((hw2 & 0xD000u) == 0x8000u) {
      if ((hw1 & 0x0380u) != 0x0380u) { d.kind = K_BRANCH_COND; return d; }                  /* B<c> T3 */
      if ((hw1 & 0xFFF0u) == 0xF3B0u) { d.kind = K_BARRIER; return d; }                      /* DSB, DMB, ISB */
      if (hw1 == 0xF3AFu && (hw2 & 0xFFF0u) == 0x80F0u) {                                    /* DBG: a mark */
        unsigned option = hw2 & 15u;
        d.mark = (option == MARK_BEGIN || option == MARK_END) ? (int)option : 0;
      }
    }
    return d;
  }
  if ((hw1 & 0xF800u) == 0xF000u) { d.dst = R(rd); d.src = R(rn); return d; }               /* DP immediate */
  if ((hw1 & 0xFE00u) == 0xF800u) {                                                           /* load/store single */
    bool load = (hw1 & 0x10u) != 0;
    d.kind = load ? K_LOAD : K_STORE;
    d.reg_offset = (hw1 & 0x80u) == 0 && rn != 15u && (hw2 & 0x0FC0u) == 0;
    d.addr = R(rn) | (d.reg_offset ? R(rm) : 0);
    if (load && rt == 15u) {
      /* LDR PC (word size); byte and halfword loads to PC are PLD and PLI, hints */
      d.kind = (hw1 & 0x60u) == 0x40u ? K_BRANCH_INDIRECT : K_ALU;
      d.writes_pc = d.kind == K_BRANCH_INDIRECT;
      d.is_return = d.writes_pc && rn == 13u;
      return d;
    }
    if (load) d.dst = R(rt); else d.src = R(rt);
    return d;
  }
  if ((hw1 & 0xFF00u) == 0xFA00u) { d.dst = R(rd); d.src = R(rn) | R(rm); return d; }      /* DP register */
  if ((hw1 & 0xFF80u) == 0xFB00u) {                                                           /* multiply, MAC, DSP mul */
    d.kind = K_MUL;
    d.dst = R(rd);
    d.acc = rt != 15u ? R(rt) : 0;
    d.src = R(rn) | R(rm) | d.acc;
    return d;
  }
  if ((hw1 & 0xFF80u) == 0xFB80u) {                                                           /* long multiply, divide */
    unsigned op1 = (hw1 >> 4) & 7u;
    d.kind = (op1 == 1u || op1 == 3u) ? K_DIV : K_MUL;
    d.dst = (d.kind == K_DIV) ? R(rd) : (R(rt) | R(rd));
    d.acc = (d.kind == K_MUL && op1 >= 4u) ? (R(rt) | R(rd)) : 0;  /* SMLAL, UMLAL, SMLALD, ... */
    d.src = R(rn) | R(rm) | d.acc;
    return d;
  }
  return d;                                                                                   /* coprocessor, other */
}

/* ---- Cortex-M4 / M33 / M55: the 3-stage (M55: 4-stage) in-order pipeline, TRM table 3-1 ---------------------- */

/* Pipeline refill of a taken branch (TRM, "P"): 1 to 3 cycles, depending on the alignment and width of the target
 * instruction and on whether the core speculated the target early. The core fetches a direct branch's target
 * speculatively while it decodes the branch (B, B<c>, BL, CBZ): 1; an indirect one (BX, POP {PC}, LDR PC, TBB) it
 * cannot: 2. A 32-bit target at a halfword address needs one more fetch: +1. */
#define M4_REFILL_DIRECT 1u
#define M4_REFILL 2u
/* SDIV/UDIV take 2 to 12 cycles, ending early on operand values the plugin cannot see (QEMU 7.2 gives no register
 * access): charged at the middle of the range. */
#define M4_DIV 7u
#define FP_LONG 14u /* VDIV.F32, VSQRT.F32: 14 cycles (Cortex-M4 TRM, FPU instruction set table) */
#define FP_MAC 3u   /* VMLA, VFMA and their negations: 3 cycles */

/* The cycles of `d` after `prev` (NULL at the start of a block) on the M4-class pipeline, as the TRM's load/store
 * timing notes give them: a load takes 2 cycles, 1 when it follows a load whose result does not form its address
 * (neighbouring loads pipeline); a store with an immediate offset takes 1 (its data phase overlaps the next
 * instruction, through the write buffer); a store with a register offset takes 2, 1 after such a load; LDM/STM and
 * PUSH/POP take 1 + N, LDRD/STRD 1 + 2; a load to PC 2 before its refill, TBB/TBH 3 (load and add) before it. The
 * M55's 4-stage pipeline adds a load-use stall: an instruction reading the register a load just wrote waits a
 * cycle. */
static unsigned m4_cost(const insn_t *d, const insn_t *prev, enum core core) {
  bool after_load = prev && prev->kind == K_LOAD;
  bool pipelined = after_load && !(d->addr & prev->dst);
  unsigned stall = (core == CORE_M55 && after_load && ((d->src | d->addr) & prev->dst)) ? 1u : 0u;
  switch (d->kind) {
  case K_LOAD: return (pipelined ? 1u : 2u) + stall;
  case K_STORE: return (!d->reg_offset || pipelined ? 1u : 2u) + stall;
  case K_LOAD_PAIR:
  case K_STORE_PAIR: return 3u;
  case K_LOAD_MULTI:
  case K_STORE_MULTI: return 1u + d->regs;
  case K_BRANCH_INDIRECT: return d->writes_pc ? 2u : (d->addr ? 3u : 1u);
  case K_DIV: return M4_DIV + stall;
  case K_FP_LONG: return FP_LONG;
  case K_FP_MAC: return FP_MAC;
  case K_BARRIER: return 1u + M4_REFILL;
  case K_VECTOR_MEM:
  case K_VECTOR:
    /* The M55 executes a 128-bit Helium instruction in two beats on its 64-bit datapath, and overlaps it with the
     * next one of the other kind (a load or store beside arithmetic): 1 cycle after an instruction of the other
     * kind, 2 otherwise. */
    return (prev && (prev->kind == K_VECTOR_MEM || prev->kind == K_VECTOR) && prev->kind != d->kind) ? 1u : 2u;
  default: return 1u + stall;
  }
}

/* ---- Cortex-M7: 6-stage, dual-issue, in order ------------------------------------------------------------------
 * The M7 TRM describes the pipeline rather than tabling cycles: two instructions issue together when the second
 * does not depend on the first and they do not compete for one unit (one load/store unit, one MAC, one FPU); loads
 * deliver their result two cycles after issue, multiplies two, though a multiply-accumulate takes its accumulator
 * late, so one accumulating into the last one's result issues the next cycle; LDM/STM move 64 bits per cycle; a
 * branch is predicted (a branch target address cache with dynamic prediction), costing nothing when predicted and a
 * pipeline refill when not. The model issues in order, at most two per cycle, under those constraints. */
#define M7_MISPREDICT 6u   /* refill of the 6-stage pipeline from the branch's resolution in execute */
#define M7_LOAD_LATENCY 2u
#define M7_MUL_LATENCY 2u
#define M7_FP_LATENCY 3u
#define M7_DIV 7u          /* iterative divider, 2-12 as on the M4: charged at the middle of the range */

typedef struct {
  unsigned cycle;            /* the cycle the next instruction may issue in */
  unsigned issued_in_cycle;  /* instructions issued in `cycle` so far */
  enum kind first_kind;      /* the first of a pair issued in `cycle` */
  uint16_t first_dst;
  unsigned ready[16];        /* cycle each core register's value is ready */
  unsigned ready_acc[16];    /* ... for a multiply-accumulate's accumulator, which the MAC pipeline forwards */
} m7_state_t;

static bool m7_unit_clash(enum kind a, enum kind b) {
  bool mem_a = a == K_LOAD || a == K_STORE, mem_b = b == K_LOAD || b == K_STORE;
  bool fp_a = a == K_FP || a == K_FP_MAC || a == K_FP_LONG, fp_b = b == K_FP || b == K_FP_MAC || b == K_FP_LONG;
  return (mem_a && mem_b) || (a == K_MUL && b == K_MUL) || (fp_a && fp_b) ||
         a == K_BRANCH || a == K_BRANCH_COND || a == K_BRANCH_INDIRECT;
}

static bool m7_single_issue(enum kind k) {
  return k == K_LOAD_MULTI || k == K_STORE_MULTI || k == K_LOAD_PAIR || k == K_STORE_PAIR || k == K_DIV ||
         k == K_FP_LONG || k == K_BARRIER;
}

/* Issues `d`; returns the cycle it issued in. */
static unsigned m7_issue(m7_state_t *s, const insn_t *d) {
  unsigned earliest = s->cycle;
  for (unsigned r = 0; r < 16; r++) {
    unsigned ready = ((d->acc >> r) & 1u) ? s->ready_acc[r] : s->ready[r];
    if (((d->src | d->addr) >> r) & 1u && ready > earliest) earliest = ready;
  }
  bool pair = earliest == s->cycle && s->issued_in_cycle == 1u && !m7_unit_clash(s->first_kind, d->kind) &&
              !m7_single_issue(d->kind) && !m7_single_issue(s->first_kind) && !((d->src | d->addr) & s->first_dst);
  unsigned at;
  if (pair) {
    at = s->cycle;
    s->issued_in_cycle = 2u;
  } else {
    at = (s->issued_in_cycle == 0u && earliest == s->cycle) ? s->cycle : (earliest > s->cycle ? earliest : s->cycle + 1u);
    if (at == s->cycle && s->issued_in_cycle != 0u) at++;
    s->cycle = at;
    s->issued_in_cycle = 1u;
    s->first_kind = d->kind;
    s->first_dst = d->dst;
  }
  unsigned busy = 0, latency = 1;
  switch (d->kind) {
  case K_LOAD: latency = M7_LOAD_LATENCY; break;
  case K_LOAD_PAIR: latency = M7_LOAD_LATENCY; busy = 1; break;
  case K_STORE_PAIR: busy = 1; break;
  case K_LOAD_MULTI: latency = M7_LOAD_LATENCY; busy = (d->regs + 1u) / 2u; break;
  case K_STORE_MULTI: busy = (d->regs + 1u) / 2u; break;
  case K_MUL: latency = M7_MUL_LATENCY; break;
  case K_DIV: busy = M7_DIV - 1u; latency = M7_DIV; break;
  case K_FP: case K_FP_MAC: latency = M7_FP_LATENCY; break;
  case K_FP_LONG: busy = FP_LONG - 1u; latency = FP_LONG; break;
  case K_BARRIER: busy = M7_MISPREDICT; break;
  default: break;
  }
  for (unsigned r = 0; r < 16; r++)
    if ((d->dst >> r) & 1u) {
      s->ready[r] = at + latency;
      /* back-to-back multiply-accumulates into one accumulator issue a cycle apart: the accumulate comes late */
      s->ready_acc[r] = d->kind == K_MUL ? at + 1u : at + latency;
    }
  if (busy) {
    s->cycle = at + busy;          /* the unit is held: the next instruction issues after it, alone */
    s->issued_in_cycle = 0u;
  }
  return at;
}

/* ---- Translation blocks ---------------------------------------------------------------------------------------- */

typedef struct {
  uint64_t pc;           /* the block's first instruction */
  uint64_t fallthrough;  /* the address after its last instruction */
  uint64_t branch_pc;    /* its last instruction's */
  uint32_t cycles;       /* static cost of the whole block */
  uint32_t insns;
  enum kind last_kind;   /* the last instruction's class: how the next block was reached */
  bool last_is_call, last_is_return, last_writes_pc, last_loop_end;
  bool target_unaligned_wide; /* this block starts with a 32-bit instruction at a halfword address */
} block_t;

typedef struct {
  uint32_t cycles_after;  /* the block's static cycles after the mark */
  uint32_t insns_after;
  int mark;
} mark_t;

static enum core core = CORE_M4;
static FILE *out;
static uint64_t cycles, insns;            /* since the start of emulation */
static const block_t *last_block;
static uint64_t open_cycles, open_insns;  /* at the open mark */
static bool window_open;

/* The M7's branch predictor: 2-bit counters indexed by the branch's address, and a return stack. */
#define PREDICTOR_ENTRIES 1024u
#define RETURN_STACK 8u
static uint8_t counters[PREDICTOR_ENTRIES];
static uint64_t return_stack[RETURN_STACK];
static unsigned return_depth;

static uint32_t m7_branch_penalty(const block_t *from, uint64_t to) {
  bool taken = to != from->fallthrough;
  if (from->last_is_call) {
    return_stack[return_depth % RETURN_STACK] = from->fallthrough;
    return_depth++;
  }
  switch (from->last_kind) {
  case K_BRANCH: return 0u;  /* direct, always taken: the target cache has it */
  case K_BRANCH_COND: {
    uint8_t *c = &counters[(from->branch_pc >> 1) % PREDICTOR_ENTRIES];
    bool predicted = *c >= 2u;
    if (taken && *c < 3u) (*c)++;
    if (!taken && *c > 0u) (*c)--;
    return predicted == taken ? 0u : M7_MISPREDICT;
  }
  case K_BRANCH_INDIRECT:
  case K_LOAD_MULTI:
  case K_LOAD:
    if (!from->last_writes_pc && from->last_kind != K_BRANCH_INDIRECT) return 0u;
    if (from->last_is_return && return_depth > 0u) {
      return_depth--;
      return return_stack[return_depth % RETURN_STACK] == to ? 0u : M7_MISPREDICT;
    }
    return M7_MISPREDICT;
  default:
    return taken ? M7_MISPREDICT : 0u;  /* left a block some other way: an exception entry or return */
  }
}

static uint32_t m4_branch_penalty(const block_t *from, const block_t *to) {
  if (to->pc == from->fallthrough) return 0u;  /* not taken, or the block only ended at a page or size limit */
  if (from->last_loop_end) return 0u;  /* LE: the core keeps the loop's start and branches back without a refill */
  bool direct = from->last_kind == K_BRANCH || from->last_kind == K_BRANCH_COND;
  return (direct ? M4_REFILL_DIRECT : M4_REFILL) + (to->target_unaligned_wide ? 1u : 0u);
}

static void block_exec(unsigned int vcpu, void *userdata) {
  const block_t *block = userdata;
  (void)vcpu;
  if (last_block) cycles += core == CORE_M7 ? m7_branch_penalty(last_block, block->pc) : m4_branch_penalty(last_block, block);
  cycles += block->cycles;
  insns += block->insns;
  last_block = block;
}

static void mark_exec(unsigned int vcpu, void *userdata) {
  const mark_t *mark = userdata;
  (void)vcpu;
  uint64_t at_cycles = cycles - mark->cycles_after, at_insns = insns - mark->insns_after;
  if (mark->mark == MARK_BEGIN) {
    open_cycles = at_cycles;
    open_insns = at_insns;
    window_open = true;
  } else if (window_open) {
    fprintf(out, "%" PRIu64 " %" PRIu64 "\n", at_cycles - open_cycles, at_insns - open_insns);
    fflush(out);  /* the host reads each window as soon as the firmware reports its run */
    window_open = false;
  }
}

static void block_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
  (void)id;
  size_t n = qemu_plugin_tb_n_insns(tb);
  if (n == 0) return;
  block_t *block = calloc(1, sizeof *block);
  mark_t *marks[4];  /* a block holds at most a few marks: they sit in separate functions' bodies */
  uint32_t mark_through[4];
  size_t n_marks = 0;
  insn_t prev = {.kind = K_ALU};
  m7_state_t m7 = {0};
  uint32_t total = 0;
  block->pc = qemu_plugin_tb_vaddr(tb);
  for (size_t i = 0; i < n; i++) {
    struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
    const uint8_t *bytes = qemu_plugin_insn_data(insn);
    size_t size = qemu_plugin_insn_size(insn);
    uint64_t pc = qemu_plugin_insn_vaddr(insn);
    uint32_t hw1 = (uint32_t)bytes[0] | ((uint32_t)bytes[1] << 8);
    uint32_t hw2 = size >= 4 ? ((uint32_t)bytes[2] | ((uint32_t)bytes[3] << 8)) : 0;
    insn_t d = decode(hw1, hw2, size >= 4);
    if (core == CORE_M7) {
      total = m7_issue(&m7, &d) + 1u;
    } else {
      total += m4_cost(&d, i ? &prev : NULL, core);
    }
    if (i == 0) block->target_unaligned_wide = size >= 4 && (pc & 2u);
    if (i == n - 1) {
      block->fallthrough = pc + size;
      block->branch_pc = pc;
      block->last_kind = d.kind;
      block->last_is_call = d.is_call;
      block->last_is_return = d.is_return;
      block->last_writes_pc = d.writes_pc;
      block->last_loop_end = d.loop_end;
    }
    if (d.mark && n_marks < 4) {
      mark_t *mark = calloc(1, sizeof *mark);
      mark->mark = d.mark;
      mark->insns_after = (uint32_t)(n - 1 - i);
      marks[n_marks] = mark;
      mark_through[n_marks++] = total;
      qemu_plugin_register_vcpu_insn_exec_cb(insn, mark_exec, QEMU_PLUGIN_CB_NO_REGS, mark);
    }
    prev = d;
  }
  block->cycles = total;
  block->insns = (uint32_t)n;
  for (size_t k = 0; k < n_marks; k++) marks[k]->cycles_after = total - mark_through[k];
  qemu_plugin_register_vcpu_tb_exec_cb(tb, block_exec, QEMU_PLUGIN_CB_NO_REGS, block);
}

static void at_exit(qemu_plugin_id_t id, void *userdata) {
  (void)id;
  (void)userdata;
  if (out) fclose(out);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
  const char *path = NULL;
  (void)info;
  for (int i = 0; i < argc; i++) {
    if (strncmp(argv[i], "core=", 5) == 0) {
      const char *name = argv[i] + 5;
      if (strcmp(name, "m4") == 0) core = CORE_M4;
      else if (strcmp(name, "m33") == 0) core = CORE_M33;
      else if (strcmp(name, "m55") == 0) core = CORE_M55;
      else if (strcmp(name, "m7") == 0) core = CORE_M7;
      else { fprintf(stderr, "lt_cycles: unknown core %s (m4, m33, m55, m7)\n", name); return -1; }
    } else if (strncmp(argv[i], "out=", 4) == 0) {
      path = argv[i] + 4;
    } else {
      fprintf(stderr, "lt_cycles: unknown argument %s (core=, out=)\n", argv[i]);
      return -1;
    }
  }
  if (!path) { fprintf(stderr, "lt_cycles: out=FILE is required\n"); return -1; }
  out = fopen(path, "w");
  if (!out) { perror(path); return -1; }
  qemu_plugin_register_vcpu_tb_trans_cb(id, block_trans);
  qemu_plugin_register_atexit_cb(id, at_exit, NULL);
  return 0;
}
