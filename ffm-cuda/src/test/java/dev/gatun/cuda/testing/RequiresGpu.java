package dev.gatun.cuda.testing;

import dev.gatun.cuda.Cuda;
import dev.gatun.cuda.CudaProbe;

import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.ConditionEvaluationResult;
import org.junit.jupiter.api.extension.ExecutionCondition;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.ExtensionContext;

import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Marks a class of GPU tests: tagged {@code gpu} (the bundle runs exactly these) and, where the CUDA probe finds no
 * usable GPU, every test is reported skipped with the probe's reason ("no CUDA: unavailable: libcuda.so.1 not
 * found"). An assumption in {@code @BeforeAll} would abort the class instead, and Maven would print
 * "Tests run: 0, Skipped: 0" with no reason, as if the class had no tests.
 */
@SuppressWarnings("exports") // a test-only annotation: its JUnit types need not be exported by the module
@Target(ElementType.TYPE)
@Retention(RetentionPolicy.RUNTIME)
@Inherited
@Tag("gpu")
@ExtendWith(RequiresGpu.Condition.class)
public @interface RequiresGpu {

    /**
     * Lets the class through and decides per test, so that each test shows up as skipped with the reason. Maven's
     * console counts skipped tests without their reasons, so the first skip of each class also prints one line
     * ("GPU tests of CudaBackendGpuTest skipped: no CUDA: unavailable: libcuda.so.1 not found").
     */
    @SuppressWarnings("exports")
    final class Condition implements ExecutionCondition {
        private static final java.util.Set<Class<?>> REPORTED = java.util.concurrent.ConcurrentHashMap.newKeySet();

        @Override
        public ConditionEvaluationResult evaluateExecutionCondition(ExtensionContext context) {
            if (context.getTestMethod().isEmpty()) return ConditionEvaluationResult.enabled("decided per test");
            CudaProbe p = Cuda.probe();
            if (p.available()) return ConditionEvaluationResult.enabled("CUDA " + p.summary());
            String reason = "no CUDA: " + p.summary();
            context.getTestClass().filter(REPORTED::add)
                    .ifPresent(c -> System.out.println("GPU tests of " + c.getSimpleName() + " skipped: " + reason));
            return ConditionEvaluationResult.disabled(reason);
        }
    }
}
