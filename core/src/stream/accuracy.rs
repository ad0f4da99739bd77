//! How far a decoded pose is from the original: the measures the lossy profiles' bounds are
//! stated in.

use crate::bsor::{Quat, Vec3};

/// Euclidean distance between two positions, in millimetres (`None` if either is not
/// finite: such positions pass through the lossy profiles exactly).
pub fn position_error_mm(a: &Vec3, b: &Vec3) -> Option<f64> {
    let d = [a.x - b.x, a.y - b.y, a.z - b.z].map(f64::from);
    let e = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt() * 1000.0;
    e.is_finite().then_some(e)
}

/// The rotation angle between two quaternions in degrees, `2·acos(|q̂·q̂′|)` with both
/// normalized, computed as `4·atan2(‖q̂ − s·q̂′‖, ‖q̂ + s·q̂′‖)` with `s` the sign of the dot
/// product (the same angle: `atan2` gives half the angle between the two 4-vectors, which
/// is half the rotation angle), because it keeps its precision for tiny angles where acos
/// near 1 does not: the f32 rounding of a unit quaternion alone would read as 0.02°.
///
/// `None` when the original is not a rotation (a squared norm more than 1e-3 from 1, or a
/// non-finite component): such values pass through the lossy profiles exactly.
pub fn rotation_error_deg(original: &Quat, decoded: &Quat) -> Option<f64> {
    let a = [original.x, original.y, original.z, original.w].map(f64::from);
    let b = [decoded.x, decoded.y, decoded.z, decoded.w].map(f64::from);
    let na2: f64 = a.iter().map(|v| v * v).sum();
    let nb2: f64 = b.iter().map(|v| v * v).sum();
    if !na2.is_finite() || (na2 - 1.0).abs() > 1e-3 || !nb2.is_finite() || nb2 == 0.0 {
        return None;
    }
    let (na, nb) = (na2.sqrt(), nb2.sqrt());
    let a = a.map(|v| v / na);
    let b = b.map(|v| v / nb);
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let s = if dot < 0.0 { -1.0 } else { 1.0 };
    let (mut diff, mut sum) = (0.0f64, 0.0f64);
    for i in 0..4 {
        diff += (a[i] - s * b[i]).powi(2);
        sum += (a[i] + s * b[i]).powi(2);
    }
    Some((4.0 * diff.sqrt().atan2(sum.sqrt())).to_degrees())
}

/// Whether [`position_error_mm`] of `a` and `b` is at most `bound_mm` (with a relative margin
/// of 1e-9 against rounding), without the square root: the encoder's check of every position.
pub(crate) fn position_within(a: &Vec3, b: &Vec3, bound_mm: f64) -> bool {
    let d = [a.x - b.x, a.y - b.y, a.z - b.z].map(f64::from);
    let limit = bound_mm / 1000.0 * (1.0 - 1e-9);
    d[0] * d[0] + d[1] * d[1] + d[2] * d[2] <= limit * limit
}

/// What [`rotation_within`] compares with for a bound of `bound_deg` degrees:
/// `cos(B/2)²`, with `B` made 1e-9 of itself smaller.
pub(crate) fn rotation_limit(bound_deg: f64) -> f64 {
    let c = (bound_deg.to_radians() * (1.0 - 1e-9) / 2.0).cos();
    c * c
}

/// Whether the rotation angle between a rotation and its decoded value,
/// `2·acos(|q·q′| / (‖q‖·‖q′‖))`, is within the bound whose [`rotation_limit`] is `limit`:
/// `(q·q′)² ≥ cos(B/2)²·‖q‖²·‖q′‖²`, without a square root, a division or `acos`. The
/// encoder's check of every rotation. Near 1 the comparison keeps about 1e-8 of the angle's
/// relative precision at the fine bound (the encoder's limits keep 0.5% from the bounds);
/// [`rotation_error_deg`] is the measure that reports. False where that gives `None`.
pub(crate) fn rotation_within(original: &Quat, decoded: &Quat, limit: f64) -> bool {
    let a = [original.x, original.y, original.z, original.w].map(f64::from);
    let b = [decoded.x, decoded.y, decoded.z, decoded.w].map(f64::from);
    let na2: f64 = a.iter().map(|v| v * v).sum();
    let nb2: f64 = b.iter().map(|v| v * v).sum();
    if !na2.is_finite() || (na2 - 1.0).abs() > 1e-3 || !nb2.is_finite() || nb2 == 0.0 {
        return false;
    }
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    dot * dot >= limit * na2 * nb2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_angles() {
        let id = Quat {
            x: 0.0,
            y: 0.0,
            z: 0.0,
            w: 1.0,
        };
        let h = std::f32::consts::FRAC_1_SQRT_2;
        let z90 = Quat {
            x: 0.0,
            y: 0.0,
            z: h,
            w: h,
        };
        assert!((rotation_error_deg(&id, &z90).unwrap() - 90.0).abs() < 1e-4);
        let neg = Quat {
            x: -0.0,
            y: -0.0,
            z: -h,
            w: -h,
        };
        assert!(
            rotation_error_deg(&z90, &neg).unwrap() < 1e-6,
            "q and -q agree"
        );
        let placeholder = Quat {
            x: -1.0,
            y: -1.0,
            z: -1.0,
            w: -1.0,
        };
        assert_eq!(rotation_error_deg(&placeholder, &id), None);
        let a = Vec3 {
            x: 0.0,
            y: 0.0,
            z: 0.0,
        };
        let b = Vec3 {
            x: 0.003,
            y: 0.004,
            z: 0.0,
        };
        assert!((position_error_mm(&a, &b).unwrap() - 5.0).abs() < 1e-6);
        assert!(position_within(&a, &b, 5.001) && !position_within(&a, &b, 4.999));
    }

    #[test]
    fn the_cheap_checks_agree_with_the_measures() {
        let mut state = 7u32;
        let mut next = || {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            f64::from(state >> 8) / f64::from(1u32 << 24) - 0.5
        };
        for _ in 0..10_000 {
            let q = [next(), next(), next(), next()];
            let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
            let a = Quat {
                x: (q[0] / n) as f32,
                y: (q[1] / n) as f32,
                z: (q[2] / n) as f32,
                w: (q[3] / n) as f32,
            };
            let e = 0.01 * next();
            let b = Quat {
                x: a.x + e as f32,
                y: a.y - (e / 2.0) as f32,
                z: -a.z,
                w: a.w,
            };
            let deg = rotation_error_deg(&a, &b).unwrap();
            for bound in [0.02, 0.2, 1.0, 10.0, 90.0] {
                if (deg - bound).abs() > 1e-4 * bound {
                    assert_eq!(
                        rotation_within(&a, &b, rotation_limit(bound)),
                        deg <= bound,
                        "{deg} {bound}"
                    );
                }
            }
        }
    }
}
