/* lt_board.h for ST Nucleo boards on STM32Cube's HAL (PlatformIO `framework = stm32cube`).
 *
 * The host link is the ST-LINK's virtual COM port, 115200 8N1: USART2 on PA2/PA3 (Nucleo-64 F446RE, F401RE),
 * USART3 on PD8/PD9 (Nucleo-144 F746ZG, H743ZI), LPUART1 on PG7/PG8 (Nucleo-144 L4R5ZI). The HAL only sets the
 * clock tree and the UART up; bytes move through the UART's registers, so a read never blocks.
 *
 * Clock: each part runs at its rated speed from its PLL (board_clock_config() below), with the flash wait states,
 * voltage scale and caches (F4 ART prefetch and caches, F7/H7 L1 I/D caches) that speed needs. If the clock setup
 * fails the board stays on its reset clock, keeps going and reports the clock it really runs at (SystemCoreClock,
 * which the HAL computes from the RCC registers): that is what happens under QEMU, whose STM32F405 model has no
 * RCC (a board file for the emulated image states that clock).
 *
 * Cycles: DWT CYCCNT. Where it does not count (QEMU implements no DWT) the image is in QEMU's netduinoplus2, and
 * SysTick, which QEMU clocks at a fixed 168 MHz, counts instructions under `-icount shift=0` (1 ns each), as on the
 * MPS2 images.
 *
 * Stack: the project's linker script (ld/) gives the main stack a fixed region [__stack_limit, __stack_top), which
 * cortexm/lt_stack.c paints. */
#include <stdint.h>

#include "lt_board.h"
#include "lt_cortexm.h"
#include "lt_dwt.h"
#include "lt_protocol.h"
#include "lt_systick.h"

#if defined(STM32F4)
#include "stm32f4xx_hal.h"
#elif defined(STM32F7)
#include "stm32f7xx_hal.h"
#elif defined(STM32L4)
#include "stm32l4xx_hal.h"
#elif defined(STM32H7)
#include "stm32h7xx_hal.h"
#else
#error "lt_board_stm32.c: no clock tree for this ST family (STM32F4, F7, L4, H7)"
#endif

#ifndef LT_BOARD
#error "define LT_BOARD (the board's name in boards/*.toml) in the env's build_flags"
#endif
#define LT_STR_(x) #x
#define LT_STR(x) LT_STR_(x)

#define LT_BAUD 115200u
/* QEMU 7.2's stm32f405 SoC drives SysTick from a fixed 168 MHz clock; under -icount shift=0 an instruction takes
 * 1 ns of virtual time, so one tick is 1e9 / 168e6 = 125 / 21 instructions. */
#define QEMU_SYSTICK_HZ 168000000u
#define QEMU_INSTRUCTIONS_HZ 1000000000u
#define QEMU_TICK_NUMERATOR (QEMU_INSTRUCTIONS_HZ / 8000000u) /* 125 */
#define QEMU_TICK_DENOMINATOR (QEMU_SYSTICK_HZ / 8000000u)    /* 21 */

static UART_HandleTypeDef host_uart;
static int counting_instructions; /* DWT does not count: QEMU, SysTick counts instructions */

/* --- per part: the VCP's pins and UART, and the PLL for the rated clock ------------------------------------------- */

#if defined(STM32F446xx) || defined(STM32F401xE)
/* Nucleo-64: HSI (16 MHz) into the PLL, so the board needs no solder bridge for the ST-LINK's MCO. */
static void vcp_pins(void) {
  __HAL_RCC_GPIOA_CLK_ENABLE();
  __HAL_RCC_USART2_CLK_ENABLE();
  GPIO_InitTypeDef pins = {.Pin = GPIO_PIN_2 | GPIO_PIN_3, .Mode = GPIO_MODE_AF_PP, .Pull = GPIO_PULLUP,
                           .Speed = GPIO_SPEED_FREQ_VERY_HIGH, .Alternate = GPIO_AF7_USART2};
  HAL_GPIO_Init(GPIOA, &pins);
  host_uart.Instance = USART2;
}

static int board_clock_config(void) {
  __HAL_RCC_PWR_CLK_ENABLE();
  RCC_OscInitTypeDef osc = {.OscillatorType = RCC_OSCILLATORTYPE_HSI, .HSIState = RCC_HSI_ON,
                            .HSICalibrationValue = RCC_HSICALIBRATION_DEFAULT};
  osc.PLL.PLLState = RCC_PLL_ON;
  osc.PLL.PLLSource = RCC_PLLSOURCE_HSI;
  osc.PLL.PLLM = 16; /* 1 MHz into the VCO */
#if defined(STM32F446xx)
  __HAL_PWR_VOLTAGESCALING_CONFIG(PWR_REGULATOR_VOLTAGE_SCALE1);
  osc.PLL.PLLN = 360; /* VCO 360 MHz, SYSCLK 180 MHz */
  osc.PLL.PLLP = RCC_PLLP_DIV2;
  osc.PLL.PLLQ = 2;
  osc.PLL.PLLR = 2;
  const uint32_t latency = FLASH_LATENCY_5, apb1 = RCC_HCLK_DIV4, apb2 = RCC_HCLK_DIV2;
#else
  __HAL_PWR_VOLTAGESCALING_CONFIG(PWR_REGULATOR_VOLTAGE_SCALE2);
  osc.PLL.PLLN = 336; /* VCO 336 MHz, SYSCLK 84 MHz */
  osc.PLL.PLLP = RCC_PLLP_DIV4;
  osc.PLL.PLLQ = 7;
  const uint32_t latency = FLASH_LATENCY_2, apb1 = RCC_HCLK_DIV2, apb2 = RCC_HCLK_DIV1;
#endif
  if (HAL_RCC_OscConfig(&osc) != HAL_OK) return 0;
#if defined(STM32F446xx)
  if (HAL_PWREx_EnableOverDrive() != HAL_OK) return 0; /* 180 MHz needs over-drive */
#endif
  RCC_ClkInitTypeDef clk = {.ClockType = RCC_CLOCKTYPE_HCLK | RCC_CLOCKTYPE_SYSCLK | RCC_CLOCKTYPE_PCLK1 |
                                         RCC_CLOCKTYPE_PCLK2,
                            .SYSCLKSource = RCC_SYSCLKSOURCE_PLLCLK, .AHBCLKDivider = RCC_SYSCLK_DIV1,
                            .APB1CLKDivider = apb1, .APB2CLKDivider = apb2};
  if (HAL_RCC_ClockConfig(&clk, latency) != HAL_OK) return 0;
  /* The ART accelerator: flash prefetch, instruction and data caches. */
  __HAL_FLASH_PREFETCH_BUFFER_ENABLE();
  __HAL_FLASH_INSTRUCTION_CACHE_ENABLE();
  __HAL_FLASH_DATA_CACHE_ENABLE();
  return 1;
}

#elif defined(STM32F746xx)
/* Nucleo-144: the ST-LINK's 8 MHz MCO into HSE (bypass), HSE_VALUE=8000000 in the env. */
static void vcp_pins(void) {
  __HAL_RCC_GPIOD_CLK_ENABLE();
  __HAL_RCC_USART3_CLK_ENABLE();
  GPIO_InitTypeDef pins = {.Pin = GPIO_PIN_8 | GPIO_PIN_9, .Mode = GPIO_MODE_AF_PP, .Pull = GPIO_PULLUP,
                           .Speed = GPIO_SPEED_FREQ_VERY_HIGH, .Alternate = GPIO_AF7_USART3};
  HAL_GPIO_Init(GPIOD, &pins);
  host_uart.Instance = USART3;
}

static int board_clock_config(void) {
  __HAL_RCC_PWR_CLK_ENABLE();
  __HAL_PWR_VOLTAGESCALING_CONFIG(PWR_REGULATOR_VOLTAGE_SCALE1);
  RCC_OscInitTypeDef osc = {.OscillatorType = RCC_OSCILLATORTYPE_HSE, .HSEState = RCC_HSE_BYPASS};
  osc.PLL.PLLState = RCC_PLL_ON;
  osc.PLL.PLLSource = RCC_PLLSOURCE_HSE;
  osc.PLL.PLLM = 4;   /* 2 MHz into the VCO */
  osc.PLL.PLLN = 216; /* VCO 432 MHz, SYSCLK 216 MHz */
  osc.PLL.PLLP = RCC_PLLP_DIV2;
  osc.PLL.PLLQ = 9;
  if (HAL_RCC_OscConfig(&osc) != HAL_OK) return 0;
  if (HAL_PWREx_EnableOverDrive() != HAL_OK) return 0; /* above 180 MHz */
  RCC_ClkInitTypeDef clk = {.ClockType = RCC_CLOCKTYPE_HCLK | RCC_CLOCKTYPE_SYSCLK | RCC_CLOCKTYPE_PCLK1 |
                                         RCC_CLOCKTYPE_PCLK2,
                            .SYSCLKSource = RCC_SYSCLKSOURCE_PLLCLK, .AHBCLKDivider = RCC_SYSCLK_DIV1,
                            .APB1CLKDivider = RCC_HCLK_DIV4, .APB2CLKDivider = RCC_HCLK_DIV2};
  if (HAL_RCC_ClockConfig(&clk, FLASH_LATENCY_7) != HAL_OK) return 0;
  SCB_EnableICache();
  SCB_EnableDCache();
  return 1;
}

#elif defined(STM32H743xx)
/* Nucleo-144: the ST-LINK's 8 MHz MCO into HSE (bypass), HSE_VALUE=8000000 in the env. 400 MHz is the rated clock
 * at voltage scale 1 on every silicon revision. */
static void vcp_pins(void) {
  __HAL_RCC_GPIOD_CLK_ENABLE();
  __HAL_RCC_USART3_CLK_ENABLE();
  GPIO_InitTypeDef pins = {.Pin = GPIO_PIN_8 | GPIO_PIN_9, .Mode = GPIO_MODE_AF_PP, .Pull = GPIO_PULLUP,
                           .Speed = GPIO_SPEED_FREQ_VERY_HIGH, .Alternate = GPIO_AF7_USART3};
  HAL_GPIO_Init(GPIOD, &pins);
  host_uart.Instance = USART3;
}

static int board_clock_config(void) {
  if (HAL_PWREx_ConfigSupply(PWR_LDO_SUPPLY) != HAL_OK) return 0;
  __HAL_PWR_VOLTAGESCALING_CONFIG(PWR_REGULATOR_VOLTAGE_SCALE1);
  for (uint32_t wait = 0; !__HAL_PWR_GET_FLAG(PWR_FLAG_VOSRDY); wait++) {
    if (wait > 1000000u) return 0;
  }
  RCC_OscInitTypeDef osc = {.OscillatorType = RCC_OSCILLATORTYPE_HSE, .HSEState = RCC_HSE_BYPASS};
  osc.PLL.PLLState = RCC_PLL_ON;
  osc.PLL.PLLSource = RCC_PLLSOURCE_HSE;
  osc.PLL.PLLM = 4;   /* 2 MHz into the VCO */
  osc.PLL.PLLN = 400; /* VCO 800 MHz, SYSCLK 400 MHz */
  osc.PLL.PLLP = 2;
  osc.PLL.PLLQ = 4;
  osc.PLL.PLLR = 2;
  osc.PLL.PLLRGE = RCC_PLL1VCIRANGE_1;
  osc.PLL.PLLVCOSEL = RCC_PLL1VCOWIDE;
  if (HAL_RCC_OscConfig(&osc) != HAL_OK) return 0;
  RCC_ClkInitTypeDef clk = {.ClockType = RCC_CLOCKTYPE_HCLK | RCC_CLOCKTYPE_SYSCLK | RCC_CLOCKTYPE_PCLK1 |
                                         RCC_CLOCKTYPE_PCLK2 | RCC_CLOCKTYPE_D3PCLK1 | RCC_CLOCKTYPE_D1PCLK1,
                            .SYSCLKSource = RCC_SYSCLKSOURCE_PLLCLK, .SYSCLKDivider = RCC_SYSCLK_DIV1,
                            .AHBCLKDivider = RCC_HCLK_DIV2, .APB3CLKDivider = RCC_APB3_DIV2,
                            .APB1CLKDivider = RCC_APB1_DIV2, .APB2CLKDivider = RCC_APB2_DIV2,
                            .APB4CLKDivider = RCC_APB4_DIV2};
  if (HAL_RCC_ClockConfig(&clk, FLASH_LATENCY_4) != HAL_OK) return 0; /* AXI at 200 MHz */
  SCB_EnableICache();
  SCB_EnableDCache();
  return 1;
}

#elif defined(STM32L4R5xx)
/* Nucleo-144 L4R5ZI (the MLPerf Tiny reference board): MSI (4 MHz) into the PLL, 120 MHz in range 1 boost mode. */
static void vcp_pins(void) {
  __HAL_RCC_PWR_CLK_ENABLE();
  HAL_PWREx_EnableVddIO2(); /* port G is powered separately */
  __HAL_RCC_GPIOG_CLK_ENABLE();
  __HAL_RCC_LPUART1_CLK_ENABLE();
  GPIO_InitTypeDef pins = {.Pin = GPIO_PIN_7 | GPIO_PIN_8, .Mode = GPIO_MODE_AF_PP, .Pull = GPIO_PULLUP,
                           .Speed = GPIO_SPEED_FREQ_VERY_HIGH, .Alternate = GPIO_AF8_LPUART1};
  HAL_GPIO_Init(GPIOG, &pins);
  host_uart.Instance = LPUART1;
}

static int board_clock_config(void) {
  __HAL_RCC_PWR_CLK_ENABLE();
  if (HAL_PWREx_ControlVoltageScaling(PWR_REGULATOR_VOLTAGE_SCALE1_BOOST) != HAL_OK) return 0;
  RCC_OscInitTypeDef osc = {.OscillatorType = RCC_OSCILLATORTYPE_MSI, .MSIState = RCC_MSI_ON,
                            .MSICalibrationValue = RCC_MSICALIBRATION_DEFAULT, .MSIClockRange = RCC_MSIRANGE_6};
  osc.PLL.PLLState = RCC_PLL_ON;
  osc.PLL.PLLSource = RCC_PLLSOURCE_MSI;
  osc.PLL.PLLM = 1;
  osc.PLL.PLLN = 60; /* VCO 240 MHz, SYSCLK 120 MHz */
  osc.PLL.PLLP = RCC_PLLP_DIV2;
  osc.PLL.PLLQ = RCC_PLLQ_DIV2;
  osc.PLL.PLLR = RCC_PLLR_DIV2;
  if (HAL_RCC_OscConfig(&osc) != HAL_OK) return 0;
  /* HAL_RCC_ClockConfig steps through AHB/2 itself on the way above 80 MHz. */
  RCC_ClkInitTypeDef clk = {.ClockType = RCC_CLOCKTYPE_HCLK | RCC_CLOCKTYPE_SYSCLK | RCC_CLOCKTYPE_PCLK1 |
                                         RCC_CLOCKTYPE_PCLK2,
                            .SYSCLKSource = RCC_SYSCLKSOURCE_PLLCLK, .AHBCLKDivider = RCC_SYSCLK_DIV1,
                            .APB1CLKDivider = RCC_HCLK_DIV1, .APB2CLKDivider = RCC_HCLK_DIV1};
  if (HAL_RCC_ClockConfig(&clk, FLASH_LATENCY_5) != HAL_OK) return 0;
  __HAL_FLASH_PREFETCH_BUFFER_ENABLE();
  __HAL_FLASH_INSTRUCTION_CACHE_ENABLE();
  __HAL_FLASH_DATA_CACHE_ENABLE();
  return 1;
}

#else
#error "lt_board_stm32.c: no VCP or clock tree for this part (F446xx, F401xE, F746xx, H743xx, L4R5xx)"
#endif

/* --- the HAL's hooks ------------------------------------------------------------------------------------------------ */

/* The vector table (ST's startup file) names it. The HAL's 1 ms tick serves its own timeouts during init; under
 * QEMU lt_board_init() then hands SysTick to the instruction counter. */
void SysTick_Handler(void) {
  if (counting_instructions) {
    lt_systick_count_wrap();
  } else {
    HAL_IncTick();
  }
}

/* --- lt_board.h ----------------------------------------------------------------------------------------------------- */

void lt_board_init(void) {
  HAL_Init();
#if defined(STM32H743xx)
  /* RM0433: the CPU must enable the D2 domain's SRAM1-3 before it uses them; lowtide may place TFLM's arenas there
   * (--arena-region, --persistent-region sram1), and they are painted before AllocateTensors. */
  __HAL_RCC_D2SRAM1_CLK_ENABLE();
  __HAL_RCC_D2SRAM2_CLK_ENABLE();
  __HAL_RCC_D2SRAM3_CLK_ENABLE();
#endif
  board_clock_config(); /* on failure: the reset clock, which SystemCoreClock then states */
  SystemCoreClockUpdate();
  HAL_InitTick(TICK_INT_PRIORITY); /* the HAL's tick at the clock really running */
  vcp_pins();
  host_uart.Init.BaudRate = LT_BAUD;
  host_uart.Init.WordLength = UART_WORDLENGTH_8B;
  host_uart.Init.StopBits = UART_STOPBITS_1;
  host_uart.Init.Parity = UART_PARITY_NONE;
  host_uart.Init.Mode = UART_MODE_TX_RX;
  host_uart.Init.HwFlowCtl = UART_HWCONTROL_NONE;
  host_uart.Init.OverSampling = UART_OVERSAMPLING_16;
  HAL_UART_Init(&host_uart);
  lt_dwt_start();
  counting_instructions = lt_dwt_cycles() == lt_dwt_cycles();
  if (counting_instructions) lt_systick_start();
}

const char *lt_board_name(void) { return LT_STR(LT_BOARD); }

void lt_board_write(const uint8_t *data, size_t length) {
  for (size_t i = 0; i < length; i++) {
    while (!__HAL_UART_GET_FLAG(&host_uart, UART_FLAG_TXE)) {
    }
#if defined(STM32F4)
    host_uart.Instance->DR = data[i];
#else
    host_uart.Instance->TDR = data[i];
#endif
  }
}

int lt_board_read_byte(void) {
#if defined(STM32F4)
  /* Reading SR then DR also clears an overrun. */
  return __HAL_UART_GET_FLAG(&host_uart, UART_FLAG_RXNE) ? (int)(host_uart.Instance->DR & 0xFFu) : -1;
#else
  if (__HAL_UART_GET_FLAG(&host_uart, UART_FLAG_ORE)) __HAL_UART_CLEAR_OREFLAG(&host_uart);
  return __HAL_UART_GET_FLAG(&host_uart, UART_FLAG_RXNE) ? (int)(host_uart.Instance->RDR & 0xFFu) : -1;
#endif
}

uint64_t lt_board_cycles(void) {
  if (counting_instructions) return lt_systick_ticks() * QEMU_TICK_NUMERATOR / QEMU_TICK_DENOMINATOR;
  return lt_dwt_cycles();
}

void lt_board_cycles_align(void) {
  if (counting_instructions) lt_systick_align(QEMU_TICK_DENOMINATOR);
}

uint32_t lt_board_cycle_hz(void) { return counting_instructions ? QEMU_INSTRUCTIONS_HZ : SystemCoreClock; }

uint8_t lt_board_counter(void) { return counting_instructions ? LT_COUNTER_INSTRUCTIONS : LT_COUNTER_CYCLES; }

uint32_t lt_board_clock_hz(void) { return SystemCoreClock; }

uint64_t lt_board_micros(void) {
  if (counting_instructions) return lt_systick_ticks() / (QEMU_SYSTICK_HZ / 1000000u);
  return lt_dwt_cycles() / (SystemCoreClock / 1000000u);
}

void lt_board_exit(int code) {
  (void)code;
  for (;;) {
    /* a real board has nowhere to go */
  }
}
